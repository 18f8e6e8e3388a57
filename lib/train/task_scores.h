// eval.tasks while training: the multiple-choice tasks scored at their steps through the run's own
// stages and shards (lib/eval does the batching and the scoring rules).
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/training_tasks.h"
#include "train/train_state.h"

namespace spmd {

class TaskScores {
 public:
  explicit TaskScores(const Config& config) : tasks_(load_training_tasks(config)) {}

  bool due(int64_t steps_done, int64_t total_steps) const;
  // Collective: the tasks due after `steps_done` updates scored by the model as it is now:
  // {"eval/<name>/acc": ..., "eval/<name>/acc_norm": ..., "eval/<name>/n": ...}.
  nlohmann::json score(TrainState& state, int64_t steps_done) const;

 private:
  std::vector<LoadedTask> tasks_;
};

}  // namespace spmd
