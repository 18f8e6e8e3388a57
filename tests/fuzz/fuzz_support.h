// What every fuzz pass shares: a deterministic generator, the tally of outcomes and failures, and
// the one rule for a file reader's case (success, or the project's UsageError naming the file).
// Header-only: both fuzz binaries (the torch-free one and the sanitized whole-tool one) include it.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd::fuzz {

using Clock = std::chrono::steady_clock;

// A single case slower than this is reported as a (near-)hang. Generous: under ASan, on 2 cores
// shared with a build, the largest legal model (1024 layers, a 2^20-position block) takes ~8 s to
// lay out and estimate, ~1.5 s on a quiet machine; a hang never ends.
inline constexpr double kSlowCaseSeconds = 30.0;

// FUZZ_VERBOSE=1 prints every case's outcome and error message (to replay or review them).
inline bool verbose() {
  static const bool on = std::getenv("FUZZ_VERBOSE") != nullptr;
  return on;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  uint64_t next() { return gen_(); }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(gen_() % n); }
  bool percent(int p) { return below(100) < static_cast<size_t>(p); }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }

 private:
  std::mt19937_64 gen_;
};

// Outcome counts and failures of one fuzz test; printed as a summary.
struct Tally {
  std::map<std::string, int> outcomes;
  std::vector<std::string> failures;
  int cases = 0;
  double slowest_s = 0;
  int slowest_case = -1;

  void record(int index, const std::string& outcome, double seconds) {
    ++cases;
    ++outcomes[outcome];
    if (seconds > slowest_s) {
      slowest_s = seconds;
      slowest_case = index;
    }
    if (seconds > kSlowCaseSeconds)
      failures.push_back(fmt::format("case {}: took {:.1f} s (outcome {})", index, seconds, outcome));
  }
  void fail(std::string what) { failures.push_back(std::move(what)); }
  int count(const std::string& prefix) const {
    int n = 0;
    for (const auto& [k, v] : outcomes)
      if (k.rfind(prefix, 0) == 0) n += v;
    return n;
  }
  void print(const std::string& title) const {
    std::string s = fmt::format("[fuzz] {}: {} cases, slowest {:.3f} s (case {})\n", title, cases,
                                slowest_s, slowest_case);
    for (const auto& [k, v] : outcomes) s += fmt::format("[fuzz]   {:<34} {}\n", k, v);
    for (const auto& f : failures) s += fmt::format("[fuzz]   FAILURE {}\n", f);
    MESSAGE(s);
  }
};

// One fuzz case of a file reader: runs `read` (which may record failures of its own) and records
// its outcome: "ok", "usage_error" (a failure unless the message names one of `files`) or
// "WRONG_EXCEPTION" (always a failure). `suffix` joins the outcome in the summary.
inline void run_reader_case(Tally& tally, int index, const std::string& label, const std::vector<std::string>& files,
                     const std::function<void()>& read, const std::string& suffix = "") {
  std::string outcome;
  const auto t0 = Clock::now();
  try {
    read();
    outcome = "ok";
  } catch (const spmd::UsageError& e) {
    const std::string what = e.what();
    const bool named = std::any_of(files.begin(), files.end(), [&](const std::string& f) { return what.find(f) != std::string::npos; });
    if (!named) tally.fail(fmt::format("{}: UsageError does not name the file: {}", label, what));
    outcome = "usage_error";
  } catch (const std::exception& e) {
    tally.fail(fmt::format("{}: {}: {}", label, typeid(e).name(), e.what()));
    outcome = "WRONG_EXCEPTION";
  }
  tally.record(index, suffix.empty() ? outcome : outcome + " " + suffix,
               std::chrono::duration<double>(Clock::now() - t0).count());
}

// A reader's fuzz pass: every case ran, none failed, and both outcomes occurred.
inline void check_reader_pass(const Tally& tally, int cases, const std::string& title) {
  tally.print(title);
  CHECK(tally.cases == cases);
  CHECK_MESSAGE(tally.failures.empty(), fmt::format("{}", fmt::join(tally.failures, "\n")));
  CHECK(tally.count("ok") > 0);
  CHECK(tally.count("usage_error") > 0);
}

}  // namespace spmd::fuzz
