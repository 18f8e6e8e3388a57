// How the ranks of one save agree on its commit: through the rendezvous store (c10d TCPStore),
// never a process group, so a save finishing in the background and the training loop's
// collectives cannot wait on each other. Keys live under checkpoint/<run>/<step>/; every wait is
// bounded by the timeout and gives up early when `cancelled` turns true.
//   every rank:  post_written(step, error)   ("" when its files are written and fsynced)
//   rank 0:      first_write_error(step)     (waits for every post) -> commit or not -> announce
//   other ranks: await_outcome(step)
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
}

namespace spmd {

class CommitBoard {
 public:
  // `store` null: a run of one rank (nothing to coordinate). `run_id` keeps this run's keys apart
  // from an earlier attempt's in a store that outlives it (torchrun's).
  CommitBoard(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::chrono::milliseconds timeout,
              int64_t run_id);
  ~CommitBoard();

  void post_written(int64_t step, const std::string& error, const std::atomic<bool>& cancelled);
  // Rank 0: "" when every rank posted success, else the first error (a missing post is one).
  std::string first_write_error(int64_t step, const std::atomic<bool>& cancelled);
  // Rank 0: the outcome ("" committed, else why not) for every rank; returns once all read it.
  void announce(int64_t step, const std::string& outcome, const std::atomic<bool>& cancelled);
  // Other ranks: rank 0's outcome (an error text when it does not come within the timeout).
  std::string await_outcome(int64_t step, const std::atomic<bool>& cancelled);

 private:
  std::string key(int64_t step, const std::string& what) const;
  // Polls until every key exists; false on timeout or cancellation.
  bool wait_for(const std::vector<std::string>& keys, const std::atomic<bool>& cancelled);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_size_;
  std::chrono::milliseconds timeout_;
  int64_t run_id_;
  std::string outcome_;  // a one-rank run's outcome, kept between announce and await
};

}  // namespace spmd
