// Folding per-block parameter rows into one row per repeated parameter.
#include "inspect/param_groups.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace spmd {

namespace {
struct SplitName {
  std::string prefix, suffix;  // "h." and ".attn.c_attn.weight"
  int64_t index = -1;          // -1: no block index
};

// "h.3.attn.w" -> {"h.", ".attn.w", 3}: the first dotted component that is a number.
SplitName split_name(const std::string& name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t end = name.find('.', start);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(start, end - start);
    if (!part.empty() && part.size() < 10 && std::all_of(part.begin(), part.end(), ::isdigit))
      return {name.substr(0, start), name.substr(end), std::stoll(part)};
    start = end + 1;
  }
  return {name, "", -1};
}

// {0..11} for a contiguous run, {0,2,5} otherwise.
std::string index_set(const std::vector<int64_t>& indices) {
  bool contiguous = true;
  for (size_t i = 1; i < indices.size(); ++i) contiguous = contiguous && indices[i] == indices[i - 1] + 1;
  if (contiguous) return fmt::format("{{{}..{}}}", indices.front(), indices.back());
  return fmt::format("{{{}}}", fmt::join(indices, ","));
}
}  // namespace

std::vector<FoldedRow> fold_repeated_blocks(const std::vector<ParamRow>& rows) {
  struct Group {
    SplitName split;
    std::vector<std::string> cells;
    std::vector<int64_t> indices;
  };
  std::vector<Group> groups;
  std::map<std::string, size_t> by_key;  // prefix, suffix and cells -> group
  for (const auto& row : rows) {
    SplitName split = split_name(row.name);
    const std::string key = split.index < 0 ? "\n" + row.name
                                            : fmt::format("{}\n{}\n{}", split.prefix, split.suffix, fmt::join(row.cells, "\n"));
    auto [it, fresh] = by_key.emplace(key, groups.size());
    if (fresh) groups.push_back({split, row.cells, {}});
    groups[it->second].indices.push_back(split.index);
  }
  std::vector<FoldedRow> out;
  for (const auto& g : groups) {
    const auto n = static_cast<int64_t>(g.indices.size());
    if (g.split.index < 0 || n == 1)
      out.push_back({g.split.index < 0 ? g.split.prefix : fmt::format("{}{}{}", g.split.prefix, g.indices[0], g.split.suffix),
                     g.cells, 1});
    else
      out.push_back({g.split.prefix + index_set(g.indices) + g.split.suffix, g.cells, n});
  }
  return out;
}

}  // namespace spmd
