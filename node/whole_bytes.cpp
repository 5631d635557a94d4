#include "node/whole_bytes.hpp"

#include <string>

namespace cushare::tools {

namespace {

using u128 = unsigned __int128;

// The powers a suffix multiplies by: 2^exp2 * 10^exp10.
void suffix_powers(std::string_view suffix, int& exp2, int& exp10) {
  static constexpr std::string_view kBinary[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  static constexpr std::string_view kDecimal[] = {"k", "M", "G", "T", "P", "E"};
  for (int i = 0; i < 6; ++i) {
    if (suffix == kBinary[i]) exp2 = 10 * (i + 1);
    if (suffix == kDecimal[i]) exp10 = 3 * (i + 1);
  }
  if (suffix.size() > 1 && (suffix[0] == 'e' || suffix[0] == 'E'))
    exp10 = std::stoi(std::string(suffix.substr(1)));
}

}  // namespace

bool is_whole_byte_count(std::string_view quantity) {
  if (!quantity.empty() && quantity.front() == '+') quantity.remove_prefix(1);
  u128 mantissa = 0;  // the parser allows at most 36 significant digits: fits
  int fraction_digits = 0;
  bool seen_point = false;
  std::size_t i = 0;
  for (; i < quantity.size(); ++i) {
    const char c = quantity[i];
    if (c == '.') {
      seen_point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    if (seen_point) ++fraction_digits;
  }
  int exp2 = 0, exp10 = 0;
  suffix_powers(quantity.substr(i), exp2, exp10);
  // value = mantissa * 2^exp2 * 10^(exp10 - fraction_digits): whole when
  // mantissa * 2^exp2 is a multiple of 10^need = 2^need * 5^need.
  const int need = fraction_digits - exp10;
  if (need <= 0 || mantissa == 0) return true;
  u128 five_power = 1;
  for (int k = 0; k < need; ++k) {
    if (five_power > mantissa) return false;
    five_power *= 5;
  }
  if (mantissa % five_power != 0) return false;
  int twos = exp2;
  for (u128 m = mantissa; m % 2 == 0 && twos < need; m /= 2) ++twos;
  return twos >= need;
}

}  // namespace cushare::tools
