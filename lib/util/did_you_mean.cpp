// Edit distance and the closest-candidate hint built on it.
#include "util/did_you_mean.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace spmd {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t subst = prev[j - 1] + (std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (!best || d < best_distance) {
      best = &c;
      best_distance = d;
    }
  }
  // Close enough to be a typo: a couple of edits, or a third of the word for long names.
  if (!best || best_distance == 0 || best_distance >= word.size() ||
      (best_distance > 2 && best_distance > word.size() / 3))
    return "";
  return fmt::format(" (did you mean '{}'?)", *best);
}

}  // namespace spmd
