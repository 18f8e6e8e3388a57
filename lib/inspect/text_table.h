// Plain-text tables for spmd-inspect: columns padded to their widest cell.
#pragma once
#include <string>
#include <vector>

namespace spmd {

// One line per row, cells separated by two spaces, each line starting with `indent`. `align` has
// one letter per column, 'l' or 'r' (missing letters: 'l').
std::string text_table(const std::vector<std::vector<std::string>>& rows, const std::string& align,
                       const std::string& indent = "");

}  // namespace spmd
