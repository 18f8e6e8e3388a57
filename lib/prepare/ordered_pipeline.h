// Prepare's parallel map with an ordered result: one thread reads batches (BatchReader), N
// workers turn each into a Result, and the caller takes the results in the batches' order. At
// most 2N + 2 batches are in flight, so memory is bounded by the workers' queues, not the corpus.
// An error (reading, or in a worker) surfaces from next() at its batch's place in the order, so
// the first error is the same for any worker count.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "prepare/input_batches.h"

namespace spmd {

template <class Result>
class OrderedPipeline {
 public:
  using Job = std::function<Result(InputBatch&)>;

  // make_job() is called once per worker (on the caller's thread): each gets its own state.
  OrderedPipeline(BatchReader& reader, int workers, const std::function<Job()>& make_job)
      : reader_(reader), max_in_flight_(2 * static_cast<size_t>(workers) + 2) {
    std::vector<Job> jobs;  // all made before any thread starts: make_job may throw
    for (int i = 0; i < workers; ++i) jobs.push_back(make_job());
    threads_.emplace_back([this] { read_loop(); });
    for (auto& job : jobs) threads_.emplace_back([this, job = std::move(job)] { work_loop(job); });
  }
  ~OrderedPipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  OrderedPipeline(const OrderedPipeline&) = delete;
  OrderedPipeline& operator=(const OrderedPipeline&) = delete;

  // The next result in batch order; false after the last. Rethrows the batch's error.
  bool next(Result& out) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock,
             [&] { return done_.count(consumed_) > 0 || (reading_done_ && consumed_ == issued_); });
    auto it = done_.find(consumed_);
    if (it == done_.end()) {
      if (read_error_) std::rethrow_exception(read_error_);
      return false;
    }
    Slot slot = std::move(it->second);
    done_.erase(it);
    ++consumed_;
    lock.unlock();
    cv_.notify_all();
    if (slot.error) std::rethrow_exception(slot.error);
    out = std::move(slot.result);
    return true;
  }

 private:
  struct Slot {
    Result result;
    std::exception_ptr error;
  };

  void read_loop() {
    std::exception_ptr error;
    for (;;) {
      InputBatch batch;
      try {
        if (!reader_.next(batch)) break;
      } catch (...) {
        error = std::current_exception();
        break;
      }
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || issued_ - consumed_ < max_in_flight_; });
      if (stopping_) return;
      todo_.emplace_back(issued_++, std::move(batch));
      lock.unlock();
      cv_.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      read_error_ = error;
      reading_done_ = true;
    }
    cv_.notify_all();
  }

  void work_loop(const Job& job) {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !todo_.empty() || reading_done_; });
      if (stopping_ || todo_.empty()) return;
      auto [seq, batch] = std::move(todo_.front());
      todo_.pop_front();
      lock.unlock();
      Slot slot;
      try {
        slot.result = job(batch);
      } catch (...) {
        slot.error = std::current_exception();
      }
      lock.lock();
      done_.emplace(seq, std::move(slot));
      lock.unlock();
      cv_.notify_all();
    }
  }

  BatchReader& reader_;
  const size_t max_in_flight_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, InputBatch>> todo_;
  std::map<uint64_t, Slot> done_;
  uint64_t issued_ = 0, consumed_ = 0;
  bool reading_done_ = false, stopping_ = false;
  std::exception_ptr read_error_;
  std::vector<std::thread> threads_;
};

}  // namespace spmd
