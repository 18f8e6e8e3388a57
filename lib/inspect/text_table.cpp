// Column widths, then padded lines.
#include "inspect/text_table.h"

#include <algorithm>

#include <fmt/format.h>

namespace spmd {

std::string text_table(const std::vector<std::vector<std::string>>& rows, const std::string& align,
                       const std::string& indent) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      const bool right = c < align.size() && align[c] == 'r';
      line += right ? fmt::format("{:>{}}", row[c], width[c]) : fmt::format("{:<{}}", row[c], width[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();  // a left-aligned last cell
    out += line + "\n";
  }
  return out;
}

}  // namespace spmd
