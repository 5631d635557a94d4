// A plain-text table that fits a terminal width: columns size to their
// content; when the table is too wide, the flexible columns (names, ids)
// shrink first and over-long cells are cut with a trailing '~'.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace cushare::tools {

enum class Align { kLeft, kRight };

struct Column {
  std::string header;
  Align align = Align::kLeft;
  bool flexible = false;      // may shrink below its content width
  std::size_t min_width = 0;  // a flexible column never shrinks below this (or its header)
};

class Table {
 public:
  explicit Table(std::vector<Column> columns);

  void add_row(std::vector<std::string> cells);  // missing cells render empty
  std::size_t rows() const { return rows_.size(); }

  // Each line starts with `indent` spaces and is at most `width` characters.
  std::string render(std::size_t width, std::size_t indent = 0) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// Cuts `text` to `width` characters, marking the cut with '~'.
std::string fit(const std::string& text, std::size_t width);

// Word-wraps `text` to `width` columns; continuation lines start with
// `indent` spaces. Words longer than a line stay whole. Ends with '\n'.
std::string wrap(const std::string& text, std::size_t width, std::size_t indent);

}  // namespace cushare::tools
