// A multiple-choice task in HellaSwag's JSON Lines: one example per line, {"ctx": text,
// "endings": [two or more texts], "label": the right ending's index, an integer or a string of
// one (Hugging Face's copy)}; other fields are ignored, blank lines skipped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spmd {

struct ChoiceExample {
  std::string ctx;
  std::vector<std::string> endings;
  int64_t label = 0;
  int64_t line = 0;  // in the file, from 1 (for messages)
};

// The first `limit` examples of `path` (0: all). UsageError naming path:line and the field for a
// malformed line, a label out of range, a file that cannot be read or holds no example.
std::vector<ChoiceExample> read_choice_task(const std::string& path, int64_t limit = 0);

}  // namespace spmd
