// Typo hints for names a user writes (config keys, logical axes, mesh axes).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace spmd {

// Levenshtein distance, case-insensitive.
size_t edit_distance(const std::string& a, const std::string& b);

// " (did you mean 'x'?)" for the candidate closest to `word` by edit distance, or "" if none is
// close enough to be a plausible typo.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace spmd
