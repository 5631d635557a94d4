#include "shm/quantity.hpp"

#include <string>

#include "shm/layout.hpp"

namespace cushare::shm {
namespace {

using u128 = unsigned __int128;

std::string quoted(std::string_view text) {
  return "'" + std::string(text) + "'";
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Digits of a decimal number "123", "1.5", ".5", "5." as mantissa and the
// number of fraction digits. Stops at the first character that is not part of
// the number; returns the count of characters consumed (0 = no number).
struct Decimal {
  u128 mantissa = 0;
  int fraction_digits = 0;
  bool any_digit = false;
  bool too_long = false;
};

std::size_t scan_decimal(std::string_view s, Decimal& out) {
  std::size_t i = 0;
  bool seen_point = false;
  int significant = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      if (seen_point) break;
      seen_point = true;
      continue;
    }
    if (!is_digit(c)) break;
    out.any_digit = true;
    if (out.mantissa != 0 || c != '0') ++significant;
    // 36 significant digits keep mantissa * 2^60 * 10^k checks inside u128
    // arithmetic below; longer numbers are out of range for bytes anyway.
    if (significant > 36) {
      out.too_long = true;
      continue;
    }
    out.mantissa = out.mantissa * 10 + static_cast<unsigned>(c - '0');
    if (seen_point) ++out.fraction_digits;
  }
  return i;
}

bool mul_checked(u128 a, u128 b, u128& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

u128 pow10_u128(int n) {
  u128 r = 1;
  for (int i = 0; i < n; ++i) r *= 10;
  return r;
}

}  // namespace

Parsed<std::uint64_t> parse_k8s_quantity(std::string_view text) {
  using R = Parsed<std::uint64_t>;
  if (text.empty()) return R::fail("empty quantity");
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f')
      return R::fail("quantity " + quoted(text) + " contains whitespace");
  }
  std::string_view s = text;
  if (s.front() == '-') return R::fail("quantity " + quoted(text) + " is negative");
  if (s.front() == '+') s.remove_prefix(1);

  Decimal d;
  const std::size_t used = scan_decimal(s, d);
  if (!d.any_digit) return R::fail("quantity " + quoted(text) + " does not start with a number");
  if (d.too_long) return R::fail("quantity " + quoted(text) + " is out of range");
  std::string_view suffix = s.substr(used);

  int exp10 = 0;
  int exp2 = 0;
  if (suffix.empty()) {
  } else if (suffix == "Ki") {
    exp2 = 10;
  } else if (suffix == "Mi") {
    exp2 = 20;
  } else if (suffix == "Gi") {
    exp2 = 30;
  } else if (suffix == "Ti") {
    exp2 = 40;
  } else if (suffix == "Pi") {
    exp2 = 50;
  } else if (suffix == "Ei") {
    exp2 = 60;
  } else if (suffix == "k") {
    exp10 = 3;
  } else if (suffix == "M") {
    exp10 = 6;
  } else if (suffix == "G") {
    exp10 = 9;
  } else if (suffix == "T") {
    exp10 = 12;
  } else if (suffix == "P") {
    exp10 = 15;
  } else if (suffix == "E") {
    exp10 = 18;
  } else if (suffix == "m") {
    return R::fail("quantity " + quoted(text) +
                   ": suffix 'm' means milli-bytes in Kubernetes quantities; did you mean 'Mi'?");
  } else if (suffix[0] == 'e' || suffix[0] == 'E') {
    std::string_view e = suffix.substr(1);
    bool negative = false;
    if (!e.empty() && (e[0] == '+' || e[0] == '-')) {
      negative = e[0] == '-';
      e.remove_prefix(1);
    }
    if (e.empty() || e.size() > 3)
      return R::fail("quantity " + quoted(text) + " has a malformed exponent");
    int v = 0;
    for (char c : e) {
      if (!is_digit(c)) return R::fail("quantity " + quoted(text) + " has a malformed exponent");
      v = v * 10 + (c - '0');
    }
    exp10 = negative ? -v : v;
  } else {
    return R::fail("quantity " + quoted(text) + " has unknown suffix '" + std::string(suffix) +
                   "' (use Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E or an exponent like e9)");
  }

  // value = mantissa * 2^exp2 * 10^(exp10 - fraction_digits), rounded up.
  const auto out_of_range = [&] {
    return R::fail("quantity " + quoted(text) + " is out of range");
  };
  u128 v = d.mantissa;
  if (!mul_checked(v, u128{1} << exp2, v)) return out_of_range();
  const int net10 = exp10 - d.fraction_digits;
  if (net10 > 0) {
    if (net10 > 38) return v == 0 ? R::ok(0) : out_of_range();
    if (!mul_checked(v, pow10_u128(net10), v)) return out_of_range();
  } else if (net10 < 0) {
    if (-net10 > 38) {
      v = v == 0 ? 0 : 1;
    } else {
      const u128 div = pow10_u128(-net10);
      v = v / div + (v % div != 0 ? 1 : 0);
    }
  }
  if (v >= static_cast<u128>(kUnlimited)) return out_of_range();
  return R::ok(static_cast<std::uint64_t>(v));
}

Parsed<std::uint32_t> parse_percent_milli(std::string_view text) {
  using R = Parsed<std::uint32_t>;
  if (text.empty()) return R::fail("empty percentage");
  if (text.back() != '%') return R::fail("percentage " + quoted(text) + " does not end with '%'");
  std::string_view s = text.substr(0, text.size() - 1);
  if (s.empty()) return R::fail("percentage " + quoted(text) + " has no number");
  Decimal d;
  const std::size_t used = scan_decimal(s, d);
  if (used != s.size() || !d.any_digit || d.too_long)
    return R::fail("percentage " + quoted(text) + " is not a number followed by one '%'");
  if (d.fraction_digits > 3)
    return R::fail("percentage " + quoted(text) + " has more than three decimals");
  if (d.mantissa > pow10_u128(12)) return R::fail("percentage " + quoted(text) + " is above 100%");
  const u128 milli = d.mantissa * pow10_u128(3 - d.fraction_digits);
  if (milli == 0) return R::fail("percentage " + quoted(text) + " must be above 0%");
  if (milli > 100000) return R::fail("percentage " + quoted(text) + " is above 100%");
  return R::ok(static_cast<std::uint32_t>(milli));
}

Parsed<MemoryAmount> parse_memory_amount(std::string_view text) {
  using R = Parsed<MemoryAmount>;
  MemoryAmount amount;
  if (!text.empty() && text.find('%') != std::string_view::npos) {
    auto p = parse_percent_milli(text);
    if (!p) return R::fail(p.error());
    amount.kind = MemoryAmount::Kind::kPercentOfCard;
    amount.percent_milli = *p;
    return R::ok(amount);
  }
  auto q = parse_k8s_quantity(text);
  if (!q) return R::fail(q.error());
  amount.kind = MemoryAmount::Kind::kBytes;
  amount.bytes = *q;
  return R::ok(amount);
}

std::uint64_t resolve_memory_amount(const MemoryAmount& amount, std::uint64_t total_bytes) {
  if (amount.kind == MemoryAmount::Kind::kBytes) return amount.bytes;
  return static_cast<std::uint64_t>(static_cast<u128>(total_bytes) * amount.percent_milli / 100000);
}

Parsed<std::uint64_t> parse_hami_memory(std::string_view text) {
  using R = Parsed<std::uint64_t>;
  if (text.empty()) return R::fail("empty memory size");
  std::string_view digits = text;
  int shift = 0;
  switch (text.back()) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    default:
      break;
  }
  if (shift != 0) digits.remove_suffix(1);
  if (digits.empty()) return R::fail("memory size " + quoted(text) + " has no number");
  u128 v = 0;
  for (char c : digits) {
    if (!is_digit(c)) {
      if (c == '-') return R::fail("memory size " + quoted(text) + " is negative");
      return R::fail("memory size " + quoted(text) +
                     " is not an integer with an optional k/m/g suffix (KiB/MiB/GiB)");
    }
    v = v * 10 + static_cast<unsigned>(c - '0');
    if (v >= static_cast<u128>(kUnlimited))
      return R::fail("memory size " + quoted(text) + " is out of range");
  }
  v <<= shift;
  if (v >= static_cast<u128>(kUnlimited))
    return R::fail("memory size " + quoted(text) + " is out of range");
  return R::ok(static_cast<std::uint64_t>(v));
}

Parsed<std::uint64_t> parse_uint_in_range(std::string_view text, std::uint64_t min,
                                          std::uint64_t max) {
  using R = Parsed<std::uint64_t>;
  if (text.empty()) return R::fail("empty number");
  u128 v = 0;
  for (char c : text) {
    if (!is_digit(c)) return R::fail(quoted(text) + " is not an unsigned integer");
    v = v * 10 + static_cast<unsigned>(c - '0');
    if (v > max) break;
  }
  if (v < min || v > max)
    return R::fail(quoted(text) + " is outside " + std::to_string(min) + ".." +
                   std::to_string(max));
  return R::ok(static_cast<std::uint64_t>(v));
}

Parsed<std::uint32_t> parse_compute_percent(std::string_view text) {
  using R = Parsed<std::uint32_t>;
  std::string_view s = text;
  if (!s.empty() && s.back() == '%') s.remove_suffix(1);
  if (s.empty() || s.find('%') != std::string_view::npos)
    return R::fail("compute limit " + quoted(text) + " is not a percentage 1..100");
  auto v = parse_uint_in_range(s, 1, 100);
  if (!v) return R::fail("compute limit " + quoted(text) + " is not a percentage 1..100");
  return R::ok(static_cast<std::uint32_t>(*v));
}

}  // namespace cushare::shm
