// Scoring eval.tasks with the training state's forward.
#include "train/task_scores.h"

#include "eval/choice_batches.h"
#include "eval/eval_run.h"
#include "train/step_passes.h"

namespace spmd {

bool TaskScores::due(int64_t steps_done, int64_t total_steps) const {
  for (const auto& t : tasks_)
    if (task_due(t.task, steps_done, total_steps)) return true;
  return false;
}

nlohmann::json TaskScores::score(TrainState& state, int64_t steps_done) const {
  nlohmann::json scores = nlohmann::json::object();
  const int64_t rows_per_rank = std::max<int64_t>(1, state.config.data.batch_size / state.dp_size());
  const RowLosses forward = [&state](const at::Tensor& inputs, const at::Tensor& targets) {
    return row_losses_passes(state, inputs, targets);
  };
  for (const auto& t : tasks_) {
    if (!task_due(t.task, steps_done, state.config.train.steps)) continue;
    const TaskScore s = summarize(score_examples(t.examples, choice_batching(*state.model, rows_per_rank, t.examples), forward));
    const std::string prefix = "eval/" + t.task.name + "/";
    scores[prefix + "acc"] = s.acc;
    scores[prefix + "acc_norm"] = s.acc_norm;
    scores[prefix + "n"] = s.n;
  }
  return scores;
}

}  // namespace spmd
