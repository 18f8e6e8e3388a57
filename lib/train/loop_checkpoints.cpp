// Checkpoints as the training loop sees them.
#include "train/loop_checkpoints.h"

#include <chrono>

#include <fmt/format.h>

#include "util/error.h"

namespace spmd {

LoopCheckpoints::LoopCheckpoints(TrainState& state, int64_t saved_step) : state_(state), saved_step_(saved_step) {
  if (!state.config.checkpoint.dir.empty()) saver_ = std::make_unique<CheckpointSaver>(state.checkpoint_view());
}

void LoopCheckpoints::save() {
  if (!saver_ || state_.step == saved_step_) return;
  saved_step_ = state_.step;
  const auto start = std::chrono::steady_clock::now();
  if (!saver_->save()) return;
  returned_[state_.step] = std::chrono::steady_clock::now();
  const double blocked_ms = std::chrono::duration<double, std::milli>(returned_[state_.step] - start).count();
  blocked_ms_.push_back(blocked_ms);
  if (state_.rank() == 0 && state_.config.checkpoint.async)
    fmt::print("checkpoint of step {}: training went on after {:.1f} ms; writing in the background\n", state_.step,
               blocked_ms);
  failed_since_last_check();  // a synchronous save's report is ready at once
}

bool LoopCheckpoints::failed_since_last_check() {
  if (!saver_) return false;
  if (auto r = saver_->poll()) report(*r);
  return !failure_.empty();
}

void LoopCheckpoints::report(const SaveReport& r) {
  if (r.step < 0) return;  // there was no save
  if (!r.error.empty()) {
    failure_ = r.error;
    return;
  }
  write_s_.push_back(r.seconds);
  if (returned_.count(r.step))
    written_after_return_ms_.push_back(std::chrono::duration<double, std::milli>(r.written - returned_[r.step]).count());
  if (state_.rank() == 0) fmt::print("checkpoint {} written in {:.2f} s\n", r.dir, r.seconds);
}

void LoopCheckpoints::raise_failure() {
  if (failure_.empty() && saver_) report(saver_->wait());
  throw RuntimeError(failure_.empty() ? std::string("a checkpoint save failed on another rank") : failure_);
}

void LoopCheckpoints::finish() {
  if (!saver_) return;
  if (saver_->in_flight_step() >= 0 && state_.rank() == 0) {
    fmt::print("waiting for the checkpoint of step {} to be written (at most runtime.timeout_s = {:.0f} s per wait)\n",
               saver_->in_flight_step(), state_.config.runtime.timeout_s);
    std::fflush(stdout);
  }
  report(saver_->wait());
  if (!failure_.empty()) throw RuntimeError(failure_);
}

void LoopCheckpoints::add_to_summary(nlohmann::json& summary) const {
  if (!saver_) return;
  summary["checkpoint_async"] = state_.config.checkpoint.async;
  summary["checkpoint_blocked_ms"] = blocked_ms_;  // rank 0's: how long each save held the loop
  summary["checkpoint_write_s"] = write_s_;        // step boundary to commit, per committed save
  summary["checkpoint_written_after_return_ms"] = written_after_return_ms_;  // > 0: written while training went on
  summary["checkpoint_staging_bytes"] = saver_->staging_bytes();
}

}  // namespace spmd
