#include "tools/table.hpp"

#include <algorithm>
#include <numeric>

namespace cushare::tools {

namespace {
constexpr std::size_t kGap = 2;  // spaces between columns
}

std::string fit(const std::string& text, std::size_t width) {
  if (text.size() <= width) return text;
  if (width == 0) return {};
  return text.substr(0, width - 1) + "~";
}

std::string wrap(const std::string& text, std::size_t width, std::size_t indent) {
  std::string out, line;
  std::size_t pos = text.find_first_not_of(' ');
  if (pos == std::string::npos) return "\n";
  line = std::string(pos, ' ');  // keep the text's own leading indentation
  while (pos < text.size()) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(pos, end - pos);
    pos = end + 1;
    if (word.empty()) continue;
    const bool fresh = line.find_first_not_of(' ') == std::string::npos;
    if (!fresh && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent, ' ');
    }
    const bool starts = line.find_first_not_of(' ') == std::string::npos;
    line += (starts ? "" : " ") + word;
  }
  return out + line + "\n";
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render(std::size_t width, std::size_t indent) const {
  const std::size_t n = columns_.size();
  std::vector<std::size_t> widths(n);
  for (std::size_t c = 0; c < n; ++c) {
    widths[c] = columns_[c].header.size();
    for (const auto& row : rows_) widths[c] = std::max(widths[c], row[c].size());
  }
  auto total = [&] {
    return indent + std::accumulate(widths.begin(), widths.end(), std::size_t{0}) +
           (n > 0 ? kGap * (n - 1) : 0);
  };
  // Shrink flexible columns, widest first, one character at a time: keeps
  // the longest names readable as long as possible.
  while (total() > width) {
    std::size_t best = n;
    for (std::size_t c = 0; c < n; ++c) {
      const std::size_t floor = std::max(columns_[c].min_width, columns_[c].header.size());
      if (columns_[c].flexible && widths[c] > floor && (best == n || widths[c] > widths[best]))
        best = c;
    }
    if (best == n) break;  // nothing left to shrink: the caller's columns are too many
    --widths[best];
  }

  std::string out;
  auto emit_line = [&](const std::vector<std::string>& cells) {
    std::string line(indent, ' ');
    for (std::size_t c = 0; c < n; ++c) {
      const std::string cell = fit(cells[c], widths[c]);
      const std::string pad(widths[c] - cell.size(), ' ');
      const bool last = c + 1 == n;
      if (columns_[c].align == Align::kRight) {
        line += pad + cell;
      } else {
        line += cell;
        if (!last) line += pad;
      }
      if (!last) line += std::string(kGap, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  std::vector<std::string> headers;
  for (const auto& col : columns_) headers.push_back(col.header);
  emit_line(headers);
  for (const auto& row : rows_) emit_line(row);
  return out;
}

}  // namespace cushare::tools
