// One pass: this rank's rows built on the host, the caller's forward, the gather.
#include "eval/choice_batches.h"

#include <algorithm>
#include <numeric>

#include "util/error.h"

namespace spmd {

namespace {
int64_t most_choices(const std::vector<EncodedExample>& examples) {
  size_t most = 0;
  for (const auto& e : examples) most = std::max(most, e.choices.size());
  return static_cast<int64_t>(most);
}

// The row length of a pass over examples [begin, end): the longest input, rounded up to the
// splits' multiple, or block_size (which every split divides).
int64_t row_length(const std::vector<EncodedExample>& examples, size_t begin, size_t end, const ChoiceBatching& b) {
  int64_t longest = 1;
  for (size_t i = begin; i < end; ++i)
    for (const auto& c : examples[i].choices) longest = std::max<int64_t>(longest, static_cast<int64_t>(c.tokens.size()) - 1);
  const int64_t rounded = (longest + b.seq_multiple - 1) / b.seq_multiple * b.seq_multiple;
  return std::min(rounded, b.block_size);
}

struct PassRows {
  at::Tensor inputs, targets;  // (examples_per_rank * choices, T)
};

// Row e * choices + c holds choice c of the pass's e-th example on this rank; rows without an
// example or a choice are padding with no target.
PassRows build_rows(const std::vector<EncodedExample>& examples, size_t first, int64_t per_rank, int64_t choices,
                    int64_t T) {
  at::Tensor inputs = at::zeros({per_rank * choices, T}, at::kLong);
  at::Tensor targets = at::full({per_rank * choices, T}, -1, at::kLong);
  auto in = inputs.accessor<int64_t, 2>();
  auto out = targets.accessor<int64_t, 2>();
  for (int64_t e = 0; e < per_rank; ++e) {
    const size_t i = first + static_cast<size_t>(e);
    if (i >= examples.size()) break;
    for (size_t c = 0; c < examples[i].choices.size(); ++c) {
      const EncodedChoice& choice = examples[i].choices[c];
      const int64_t row = e * choices + static_cast<int64_t>(c), L = static_cast<int64_t>(choice.tokens.size());
      for (int64_t t = 0; t + 1 < L; ++t) in[row][t] = choice.tokens[static_cast<size_t>(t)];
      for (int64_t t = choice.first_scored - 1; t + 1 < L; ++t) out[row][t] = choice.tokens[static_cast<size_t>(t + 1)];
    }
  }
  return {inputs, targets};
}
}  // namespace

int64_t examples_per_pass(const std::vector<EncodedExample>& examples, int64_t rows_per_rank) {
  return std::max<int64_t>(1, rows_per_rank / std::max<int64_t>(1, most_choices(examples)));
}

std::vector<ExampleScore> score_examples(const std::vector<EncodedExample>& examples, const ChoiceBatching& b,
                                         const RowLosses& row_losses) {
  const int64_t choices = most_choices(examples), per_rank = b.examples_per_rank;
  const size_t per_pass = static_cast<size_t>(per_rank * b.dp_size);
  std::vector<ExampleScore> scores;
  for (size_t base = 0; base < examples.size(); base += per_pass) {
    const size_t end = std::min(examples.size(), base + per_pass);
    const int64_t T = row_length(examples, base, end, b);
    PassRows rows = build_rows(examples, base + static_cast<size_t>(b.dp_index * per_rank), per_rank, choices, T);
    at::Tensor losses = row_losses(rows.inputs.to(b.device), rows.targets.to(b.device)).to(at::kDouble).reshape({1, -1});
    if (b.dp_group && b.dp_group->size() > 1) losses = b.dp_group->all_gather(losses, 0);  // (dp, rows): pass order
    losses = losses.reshape({-1, choices}).to(at::kCPU).contiguous();  // (per_pass, choices)
    auto sums = losses.accessor<double, 2>();
    for (size_t i = base; i < end; ++i) {
      const auto& example = examples[i];
      ExampleScore score{example.index, example.label, {}, {}};
      for (size_t c = 0; c < example.choices.size(); ++c) {
        const double sum = sums[static_cast<int64_t>(i - base)][static_cast<int64_t>(c)];
        score.sums.push_back(sum);
        score.means.push_back(sum / static_cast<double>(example.choices[c].scored()));
      }
      scores.push_back(std::move(score));
    }
  }
  return scores;
}

}  // namespace spmd
