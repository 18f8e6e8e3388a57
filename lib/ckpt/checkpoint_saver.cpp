// One save from the step boundary to the commit: the writer thread, and the agreement on the
// outcome through the rendezvous store. A save reads top-down: describe the job and stage its blocks
// (shard_writer), write this rank's file (shard_writer), commit on rank 0 (checkpoint_commit).
#include "ckpt/checkpoint_saver.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ckpt/checkpoint_commit.h"
#include "ckpt/checkpoint_format.h"
#include "util/error.h"
#include "util/exception_text.h"

namespace fs = std::filesystem;

namespace spmd {

namespace {
using Clock = std::chrono::steady_clock;

// "" when `body` succeeds, else its error's text.
template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
    return "";
  } catch (const std::exception& e) {
    return exception_text(e);
  }
}

// Rank 0 picks a number that keeps this run's store keys apart from an earlier attempt's.
int64_t agreed_run_id(const Communicator& comm) {
  const int64_t mine = Clock::now().time_since_epoch().count() ^ (static_cast<int64_t>(::getpid()) << 40);
  at::Tensor t = at::full({1}, mine, at::kLong);
  comm.control().broadcast(t, 0);
  return t.item<int64_t>();
}

std::string failure_message(const SaveJob& job, const std::string& reason) {
  const auto latest = find_latest_checkpoint(job.dir);
  return fmt::format("the checkpoint of step {} in {} failed: {}; its temporary directory {} was removed; {}", job.step,
                     job.dir, reason, job.tmp_dir,
                     latest ? "the latest checkpoint is still " + *latest : std::string("there is no complete checkpoint"));
}
}  // namespace

CheckpointSaver::CheckpointSaver(CheckpointState state) : state_(state) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(state_.config.runtime.timeout_s * 1000));
  board_ = std::make_unique<CommitBoard>(state_.comm.store(), state_.comm.rank(),
                                         static_cast<int>(state_.comm.mesh().size()), timeout,
                                         agreed_run_id(state_.comm));
}

CheckpointSaver::~CheckpointSaver() {
  if (!writer_.joinable()) return;
  if (!finished_) {
    cancelled_ = true;
    if (state_.comm.rank() == 0)
      fmt::print(stderr, "abandoning the checkpoint of step {} in flight; it is never committed\n", in_flight_step_);
  }
  writer_.join();
}

bool CheckpointSaver::save() {
  const SaveReport previous = wait();
  if (!previous.error.empty()) throw RuntimeError(previous.error);
  if (previous.step >= 0) ready_ = previous;  // still to be reported by poll()
  SaveJob job = describe_save(state_);
  if (!prepare_save_dir(state_, job)) return false;
  if (!state_.config.checkpoint.async) {
    for (auto& b : job.blocks) b.tensor = b.tensor.to(at::kCPU).contiguous();  // no copy on the CPU
    ready_ = write_and_commit(job);
    return true;
  }
  job.blocks = staging_.stage(job.blocks).tensors;  // training may change the live tensors from here on
  finished_ = false;
  in_flight_step_ = job.step;
  writer_ = std::thread([this, job = std::move(job)] {
    report_ = write_and_commit(job);
    finished_ = true;
  });
  return true;
}

std::optional<SaveReport> CheckpointSaver::poll() {
  if (ready_) {
    std::optional<SaveReport> r = std::move(ready_);
    ready_.reset();
    return r;
  }
  if (!writer_.joinable() || !finished_) return std::nullopt;
  writer_.join();
  in_flight_step_ = -1;
  return report_;
}

SaveReport CheckpointSaver::wait() {
  if (!writer_.joinable()) {
    SaveReport r = ready_.value_or(SaveReport{});
    ready_.reset();
    return r;
  }
  writer_.join();
  in_flight_step_ = -1;
  return report_;
}

SaveReport CheckpointSaver::write_and_commit(const SaveJob& job) {
  const auto start = Clock::now();
  std::string error = error_of([&] { write_rank_files(job, cancelled_); });
  const auto written = Clock::now();
  if (!error.empty()) {
    error = fmt::format("rank {}: {}", job.rank, error);
    std::error_code ec;  // free what it wrote at once (a full disk); rank 0 removes the directory
    if (!cancelled_) fs::remove(job.tmp_dir + "/" + checkpoint_rank_file_name(job.rank), ec);
  }
  std::string outcome;
  try {
    board_->post_written(job.step, error, cancelled_);
    outcome = job.rank == 0 ? commit_on_rank_zero(job, error) : board_->await_outcome(job.step, cancelled_);
  } catch (const std::exception& e) {
    outcome = failure_message(job, "the rendezvous store failed: " + exception_text(e));
  }
  return {job.step, job.final_dir, outcome, std::chrono::duration<double>(Clock::now() - start).count(), written};
}

std::string CheckpointSaver::commit_on_rank_zero(const SaveJob& job, const std::string& own_error) {
  std::string outcome = board_->first_write_error(job.step, cancelled_);
  if (!own_error.empty()) outcome = own_error;
  if (cancelled_) outcome = "abandoned";  // left as a crash leaves it: temporary, discarded by the next save
  if (outcome.empty()) outcome = error_of([&] { commit_save(job, state_.config, state_.model.layout()); });
  if (!outcome.empty() && !cancelled_) {
    std::error_code ec;
    fs::remove_all(job.tmp_dir, ec);
    outcome = failure_message(job, outcome);
  }
  board_->announce(job.step, outcome, cancelled_);
  return outcome;
}

}  // namespace spmd
