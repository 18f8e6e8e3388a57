// Saving checkpoints without stopping training (Orbax's AsyncCheckpointer, torch DCP's
// async_save): at a checkpoint step each rank copies its shards and the small state into a
// staging buffer allocated once, and a writer thread writes and fsyncs the files while training
// goes on; rank 0 commits (index, rename, keep N) once every rank is done, agreeing through the
// rendezvous store (ckpt/commit_board.h), never the training process group. One save in flight
// per rank: the next save waits for it. With checkpoint.async: false the same steps run before
// save() returns.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "ckpt/checkpoint_state.h"
#include "ckpt/commit_board.h"
#include "ckpt/shard_writer.h"
#include "ckpt/staging_buffer.h"

namespace spmd {

// How a save ended, the same on every rank.
struct SaveReport {
  int64_t step = -1;   // -1: there was no save
  std::string dir;     // the final directory (complete when error is empty)
  std::string error;   // empty: committed; else what failed, the directory, and the latest checkpoint
  double seconds = 0;  // from the step boundary to the commit
  std::chrono::steady_clock::time_point written{};  // when this rank's file was written and fsynced
};

class CheckpointSaver {
 public:
  // Collective (agrees on a run id for the commit's store keys).
  explicit CheckpointSaver(CheckpointState state);
  // An error path: abandons a save in flight (never committed; its directory stays temporary and
  // is discarded by the next save), saying so on rank 0.
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Collective, at a step boundary: waits for the save in flight (RuntimeError if it failed),
  // then saves the current step. Returns false when that step was saved already.
  bool save();
  // The save that finished since the last call (without waiting), once; nullopt while one is
  // still being written or none was started.
  std::optional<SaveReport> poll();
  // Waits for the save in flight (each of its waits is bounded by runtime.timeout_s); its report,
  // or one with step -1 when nothing was in flight.
  SaveReport wait();
  // The step being saved in the background, or -1.
  int64_t in_flight_step() const { return in_flight_step_; }
  int64_t staging_bytes() const { return staging_.bytes(); }

 private:
  SaveReport write_and_commit(const SaveJob& job);
  std::string commit_on_rank_zero(const SaveJob& job, const std::string& own_error);

  CheckpointState state_;
  std::unique_ptr<CommitBoard> board_;
  StagingBuffer staging_;
  std::thread writer_;
  std::atomic<bool> finished_{false}, cancelled_{false};
  int64_t in_flight_step_ = -1;
  SaveReport report_;                 // written by the writer before finished_
  std::optional<SaveReport> ready_;   // a synchronous save's report, until poll() or wait()
};

}  // namespace spmd
