// Slurm hostlist and tasks-per-node expansion (see hostlist.h).
#include "comm/hostlist.h"

#include <cctype>

#include <fmt/format.h>

#include "util/error.h"

namespace spmd {

namespace {
// Splits at commas outside brackets.
std::vector<std::string> split_top_level(const std::string& list, const std::string& variable) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    SPMD_CHECK(depth == 0 || depth == 1, "{}='{}': brackets do not nest in a Slurm host list", variable, list);
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  SPMD_CHECK(depth == 0, "{}='{}': unbalanced '[' in the host list", variable, list);
  parts.push_back(current);
  return parts;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// "01-03,7" (a bracket's contents) -> {"01", "02", "03", "7"}.
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& variable, const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t comma = ranges.find(',', start);
    if (comma == std::string::npos) comma = ranges.size();
    const std::string item = ranges.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    SPMD_CHECK(all_digits(lo) && all_digits(hi) && lo.size() < 10 && hi.size() < 10,
               "{}='{}': '[{}]' holds '{}', not a number or a range like 01-04", variable, list, ranges, item);
    const long first = std::stol(lo), last = std::stol(hi);
    SPMD_CHECK(first <= last && last - first < 100000, "{}='{}': the range '{}' is empty or too long", variable, list, item);
    for (long n = first; n <= last; ++n) out.push_back(fmt::format("{:0{}}", n, lo.size()));
    start = comma + 1;
  }
  return out;
}

// One top-level entry, e.g. "a[1-2]-ib": every bracket group multiplies the names so far.
std::vector<std::string> expand_entry(const std::string& entry, const std::string& variable, const std::string& list) {
  std::vector<std::string> names{""};
  size_t pos = 0;
  while (pos < entry.size()) {
    const size_t open = entry.find('[', pos);
    const std::string literal = entry.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    for (auto& n : names) n += literal;
    if (open == std::string::npos) break;
    const size_t close = entry.find(']', open);
    std::vector<std::string> grown;
    for (const auto& n : names)
      for (const auto& suffix : expand_ranges(entry.substr(open + 1, close - open - 1), variable, list))
        grown.push_back(n + suffix);
    names.swap(grown);
    pos = close + 1;
  }
  return names;
}
}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& variable) {
  std::vector<std::string> hosts;
  for (const auto& entry : split_top_level(list, variable)) {
    SPMD_CHECK(!entry.empty(), "{}='{}': an empty host name in the list", variable, list);
    for (auto& h : expand_entry(entry, variable, list)) hosts.push_back(std::move(h));
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& list, const std::string& variable) {
  std::vector<int> counts;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(start, comma - start);
    const size_t paren = item.find("(x");
    const std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      SPMD_CHECK(item.back() == ')', "{}='{}': '{}' should look like 2(x3)", variable, list, item);
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    SPMD_CHECK(all_digits(count) && all_digits(repeat) && count.size() < 7 && repeat.size() < 7,
               "{}='{}': '{}' is not a task count like 4 or 2(x3)", variable, list, item);
    for (int i = 0; i < std::stoi(repeat); ++i) counts.push_back(std::stoi(count));
    start = comma + 1;
  }
  return counts;
}

}  // namespace spmd
