// Encoding examples into scored windows, and the accuracies from per-choice losses.
#include "eval/choice_scoring.h"

#include <algorithm>

#include <fmt/format.h>

#include "util/error.h"

namespace spmd {

namespace {
std::vector<int64_t> encode_field(const DatasetMeta& tokenizer, const std::string& text, const std::string& where,
                                  const std::string& field) {
  try {
    return encode(tokenizer, text);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: field {}: {}", where, field, e.what()));
  }
}

EncodedChoice window(const std::vector<int64_t>& ctx, const std::vector<int64_t>& ending, int64_t block_size) {
  EncodedChoice choice;
  choice.tokens = ctx;
  choice.tokens.insert(choice.tokens.end(), ending.begin(), ending.end());
  const int64_t size = static_cast<int64_t>(choice.tokens.size());
  const int64_t dropped = std::max<int64_t>(0, size - block_size);  // its own last block_size tokens
  choice.tokens.erase(choice.tokens.begin(), choice.tokens.begin() + dropped);
  choice.first_scored = std::max<int64_t>(1, static_cast<int64_t>(ctx.size()) - dropped);
  return choice;
}
}  // namespace

EncodedExample encode_example(const DatasetMeta& tokenizer, const ChoiceExample& example, int64_t index,
                              int64_t block_size, const std::string& where) {
  SPMD_CHECK(block_size >= 2, "scoring needs model.block_size >= 2, not {}", block_size);
  EncodedExample encoded;
  encoded.index = index;
  encoded.label = example.label;
  const std::vector<int64_t> ctx = encode_field(tokenizer, example.ctx, where, "'ctx'");
  SPMD_CHECK(!ctx.empty(), "{}: field 'ctx': encodes to no tokens", where);
  for (size_t i = 0; i < example.endings.size(); ++i) {
    const std::string field = fmt::format("'endings'[{}]", i);
    const std::vector<int64_t> ending = encode_field(tokenizer, " " + example.endings[i], where, field);
    encoded.choices.push_back(window(ctx, ending, block_size));
    SPMD_CHECK(encoded.choices.back().scored() >= 1, "{}: field {}: no token left to score", where, field);
  }
  return encoded;
}

std::vector<EncodedExample> encode_task(const DatasetMeta& tokenizer, const std::string& path, int64_t limit,
                                        int64_t block_size) {
  const std::vector<ChoiceExample> rows = read_choice_task(path, limit);
  std::vector<EncodedExample> encoded;
  encoded.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    encoded.push_back(encode_example(tokenizer, rows[i], static_cast<int64_t>(i), block_size,
                                     fmt::format("{}:{}", path, rows[i].line)));
  return encoded;
}

int64_t lowest(const std::vector<double>& values) {
  SPMD_ASSERT(!values.empty(), "lowest() of nothing");
  // min_element keeps the first of equal values.
  return std::min_element(values.begin(), values.end()) - values.begin();
}

TaskScore summarize(std::vector<ExampleScore> examples) {
  TaskScore task;
  task.n = static_cast<int64_t>(examples.size());
  int64_t right = 0, right_norm = 0;
  for (const auto& e : examples) {
    right += lowest(e.sums) == e.label;
    right_norm += lowest(e.means) == e.label;
  }
  if (task.n > 0) {
    task.acc = static_cast<double>(right) / static_cast<double>(task.n);
    task.acc_norm = static_cast<double>(right_norm) / static_cast<double>(task.n);
  }
  task.examples = std::move(examples);
  return task;
}

}  // namespace spmd
