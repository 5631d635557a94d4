#include "tools/command_suggest.hpp"

#include <algorithm>

namespace cushare::tools {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus adjacent transpositions, the
  // commonest typo ("stauts").
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::optional<std::string> suggest_command(std::string_view typed,
                                           const std::vector<std::string>& known) {
  if (typed.empty()) return std::nullopt;
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& name : known) {
    const std::size_t distance = edit_distance(typed, name);
    if (!best || distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  if (best && best_distance <= 2 && 2 * best_distance < typed.size()) return best;
  std::optional<std::string> prefix_of;
  for (const auto& name : known) {
    if (name.size() > typed.size() && name.compare(0, typed.size(), typed) == 0) {
      if (prefix_of) return std::nullopt;  // "s": several commands start so
      prefix_of = name;
    }
  }
  return prefix_of;
}

}  // namespace cushare::tools
