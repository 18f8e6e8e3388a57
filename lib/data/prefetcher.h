// A background thread that calls `produce` ahead of the consumer and keeps up to `depth` results
// in a bounded queue. An exception thrown by `produce` ends the thread and is rethrown, with its
// type, by next() once the results produced before it are consumed: never a hang. The destructor
// stops and joins the thread.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace spmd {

template <class Item>
class Prefetcher {
 public:
  Prefetcher(std::function<Item()> produce, size_t depth)
      : produce_(std::move(produce)), depth_(depth < 1 ? 1 : depth), thread_([this] { run(); }) {}

  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Blocks until the next result is ready; rethrows the producer's exception (every call after).
  Item next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    cv_.notify_all();  // room for the producer
    return item;
  }

 private:
  void run() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || queue_.size() < depth_; });
        if (stop_) return;
      }
      try {
        Item item = produce_();  // outside the lock: this is the slow part
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(std::move(item));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
      }
      cv_.notify_all();
      if (error_) return;  // only this thread writes error_
    }
  }

  std::function<Item()> produce_;
  size_t depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;  // last member: starts once everything above is built
};

}  // namespace spmd
