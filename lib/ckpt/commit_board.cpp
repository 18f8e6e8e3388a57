// The store-backed commit of a checkpoint save.
#include "ckpt/commit_board.h"

#include <algorithm>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/Store.hpp>


namespace spmd {

namespace {
std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }
// Posts hold a marker so that an empty error and a missing key cannot be confused.
const std::string kOk = "ok";
}  // namespace

CommitBoard::CommitBoard(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                         std::chrono::milliseconds timeout, int64_t run_id)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), timeout_(timeout), run_id_(run_id) {}

CommitBoard::~CommitBoard() = default;

std::string CommitBoard::key(int64_t step, const std::string& what) const {
  return fmt::format("checkpoint/{:x}/{}/{}", run_id_, step, what);
}

bool CommitBoard::wait_for(const std::vector<std::string>& keys, const std::atomic<bool>& cancelled) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto pause = std::chrono::milliseconds(1);
  while (!store_->check(keys)) {
    if (cancelled || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return true;
}

void CommitBoard::post_written(int64_t step, const std::string& error, const std::atomic<bool>&) {
  if (!store_) return;
  store_->set(key(step, fmt::format("written/{}", rank_)), bytes_of(error.empty() ? kOk : error));
}

std::string CommitBoard::first_write_error(int64_t step, const std::atomic<bool>& cancelled) {
  if (!store_) return "";
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r) keys.push_back(key(step, fmt::format("written/{}", r)));
  if (!wait_for(keys, cancelled)) {
    if (cancelled) return "abandoned";
    std::string missing;
    for (int r = 0; r < world_size_; ++r)
      if (!store_->check({keys[static_cast<size_t>(r)]})) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
    return fmt::format("rank(s) {} did not finish writing within runtime.timeout_s = {:.0f} s", missing,
                       static_cast<double>(timeout_.count()) / 1000);
  }
  std::string first;
  for (int r = 0; r < world_size_; ++r) {
    const std::string post = text_of(store_->get(keys[static_cast<size_t>(r)]));
    if (post != kOk && first.empty()) first = post;
    store_->deleteKey(keys[static_cast<size_t>(r)]);
  }
  return first;
}

void CommitBoard::announce(int64_t step, const std::string& outcome, const std::atomic<bool>& cancelled) {
  if (!store_) {
    outcome_ = outcome;
    return;
  }
  store_->set(key(step, "outcome"), bytes_of(outcome.empty() ? kOk : outcome));
  // The store lives in rank 0's process: wait (bounded) until every peer has read the outcome.
  const std::string read = key(step, "outcome_read");
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (store_->add(read, 0) < world_size_ - 1 && !cancelled && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  store_->deleteKey(read);
  store_->deleteKey(key(step, "outcome"));
}

std::string CommitBoard::await_outcome(int64_t step, const std::atomic<bool>& cancelled) {
  if (!store_) return outcome_;
  const std::string k = key(step, "outcome");
  if (!wait_for({k}, cancelled))
    return cancelled ? "abandoned"
                     : fmt::format("rank 0 did not commit within runtime.timeout_s = {:.0f} s",
                                   static_cast<double>(timeout_.count()) / 1000);
  const std::string outcome = text_of(store_->get(k));
  store_->add(key(step, "outcome_read"), 1);
  return outcome == kOk ? "" : outcome;
}

}  // namespace spmd
