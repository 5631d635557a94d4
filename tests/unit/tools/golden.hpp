// Golden-file comparison: the expected output lives in tests/unit/tools/golden/.
// CUSHARE_UPDATE_GOLDEN=1 rewrites the files (review the diff before committing).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "region_fixture.hpp"

namespace cushare::tools::testing {

inline void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (std::size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size()))
    text.replace(pos, from.size(), to);
}

inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::filesystem::path path = std::filesystem::path(CUSHARE_GOLDEN_DIR) / name;
  if (const char* update = std::getenv("CUSHARE_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << actual;
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(path))
      << "missing golden file " << path << " (run with CUSHARE_UPDATE_GOLDEN=1 to create it)";
  EXPECT_EQ(read_file(path), actual) << "output differs from " << path;
}

}  // namespace cushare::tools::testing
