// llm.c's multiple-choice scoring (dev/data/hellaswag.py). Each choice is the sequence
// ctx tokens + tokens of " " + ending; its score is the cross-entropy of its own tokens, each
// given everything before it: summed (acc picks the lowest sum) and averaged over those tokens
// (acc_norm picks the lowest mean). Ties go to the lowest index. A sequence longer than
// block_size keeps its own last block_size tokens; a choice token left at the window's first
// position has nothing to be predicted from and is not scored.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/meta.h"
#include "eval/choice_task.h"

namespace spmd {

struct EncodedChoice {
  std::vector<int64_t> tokens;  // the window fed to the model: at most block_size tokens
  int64_t first_scored = 1;     // tokens[first_scored..] are scored (first_scored >= 1)
  int64_t scored() const { return static_cast<int64_t>(tokens.size()) - first_scored; }
};

struct EncodedExample {
  int64_t index = 0;  // in the task, from 0
  int64_t label = 0;
  std::vector<EncodedChoice> choices;
};

// UsageError naming `where` (file:line) and the field for text the vocabulary cannot encode.
EncodedExample encode_example(const DatasetMeta& tokenizer, const ChoiceExample& example, int64_t index,
                              int64_t block_size, const std::string& where);

// Every example of a task file, encoded (read_choice_task's errors, then encode_example's).
std::vector<EncodedExample> encode_task(const DatasetMeta& tokenizer, const std::string& path, int64_t limit,
                                        int64_t block_size);

struct ExampleScore {
  int64_t index = 0, label = 0;
  std::vector<double> sums, means;  // per choice
};

struct TaskScore {
  int64_t n = 0;
  double acc = 0, acc_norm = 0;  // fractions of the n examples
  std::vector<ExampleScore> examples;
};

// The index of the lowest value; the lowest index among equals.
int64_t lowest(const std::vector<double>& values);

TaskScore summarize(std::vector<ExampleScore> examples);

}  // namespace spmd
