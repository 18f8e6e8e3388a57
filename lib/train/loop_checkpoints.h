// The training loop's checkpoints: saving at a step boundary, reporting finished saves, raising a
// failed background save in the loop, and waiting for the save in flight at the end of a run or
// a stop. Blocked and write times per save go into summary.json.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_saver.h"
#include "train/train_state.h"

namespace spmd {

class LoopCheckpoints {
 public:
  // Collective when checkpoint.dir is set. `saved_step`: the step restored from, or -1.
  LoopCheckpoints(TrainState& state, int64_t saved_step);
  bool enabled() const { return saver_ != nullptr; }
  // Collective: saves the current step unless it is saved already (after waiting for the save in
  // flight; RuntimeError if that one failed).
  void save();
  // After each step, without waiting: reports a save that finished; true when one failed (every
  // rank then votes, and raise_failure() stops them all at the same step).
  bool failed_since_last_check();
  [[noreturn]] void raise_failure();
  // The end of a run or a stop: waits for the save in flight, saying so; RuntimeError if it failed.
  void finish();
  void add_to_summary(nlohmann::json& summary) const;

 private:
  void report(const SaveReport& r);

  TrainState& state_;
  std::unique_ptr<CheckpointSaver> saver_;
  int64_t saved_step_;
  std::string failure_;
  std::vector<double> blocked_ms_, write_s_;
  // When each save let training go on, and how long after that its file was written: > 0 shows
  // the write overlapped training.
  std::map<int64_t, std::chrono::steady_clock::time_point> returned_;
  std::vector<double> written_after_return_ms_;
};

}  // namespace spmd
