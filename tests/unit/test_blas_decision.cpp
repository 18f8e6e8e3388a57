// The BLAS choice's decisions on made-up rounds and entries (kernels/cpu/blas_decision.h): a clear
// win either way is timed, a close or disagreeing timing falls back to the vendor's rule, and a
// stored choice is timed again only while it is not final and re-timings are left.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "kernels/cpu/blas_decision.h"

using namespace spmd::kernels::cpu;

namespace {

// Eight pairs whose ratios t_mkl / t_openblas are `ratios` (OpenBLAS at 10 ms each round).
std::vector<Round> rounds_with_ratios(const std::vector<double>& ratios) {
  std::vector<Round> rounds;
  for (double r : ratios) rounds.push_back({0.010 * r, 0.010});
  return rounds;
}

StoredChoice stored(const std::vector<double>& ratios, const std::string& vendor, double others_cpu, int retimes) {
  StoredChoice c;
  c.rounds = rounds_with_ratios(ratios);
  c.vendor = vendor;
  c.decision = decide(c.rounds, vendor);
  c.others_cpu = others_cpu;
  c.retimes = retimes;
  c.unix_time = 1000;
  return c;
}

constexpr double kLater = 1000 + 3600;  // an hour after the stored timing: a later start

}  // namespace

TEST_CASE("blas decision: a clear win is timed, either way, whatever the vendor") {
  const Decision open = decide(rounds_with_ratios({1.3, 1.25, 1.4, 1.2, 1.35, 1.3, 1.28, 1.31}), "GenuineIntel");
  CHECK(open.library == Blas::openblas);
  CHECK(open.basis == Basis::timed);
  CHECK(open.median_ratio == doctest::Approx(1.3));
  CHECK(open.agreement == 1.0);
  const Decision mkl = decide(rounds_with_ratios({0.7, 0.8, 0.75, 0.72, 0.9, 1.05, 0.8, 0.78}), "AuthenticAMD");
  CHECK(mkl.library == Blas::mkl);
  CHECK(mkl.basis == Basis::timed);
  CHECK(mkl.agreement == doctest::Approx(7.0 / 8));
}

TEST_CASE("blas decision: a close timing goes by the vendor's rule") {
  const auto close = rounds_with_ratios({1.05, 1.04, 1.06, 1.03, 1.05, 1.04, 1.07, 1.02});  // all agree, small margin
  CHECK(decide(close, "AuthenticAMD").library == Blas::openblas);
  CHECK(decide(close, "GenuineIntel").library == Blas::mkl);
  CHECK(decide(close, "HygonGenuine").library == Blas::mkl);  // anything else: libtorch's own MKL
  CHECK(decide(close, "GenuineIntel").basis == Basis::rule);
  CHECK(decide(close, "GenuineIntel").median_ratio == doctest::Approx(1.045));
}

TEST_CASE("blas decision: rounds that disagree go by the rule, even past the margin") {
  // Median 1.2x, but only 5 of 8 rounds on its side: a few preempted rounds, not a faster library.
  const auto split = rounds_with_ratios({1.3, 1.25, 1.2, 1.2, 1.3, 0.6, 0.7, 0.8});
  const Decision d = decide(split, "GenuineIntel");
  CHECK(d.median_ratio == doctest::Approx(1.2));
  CHECK(d.agreement == doctest::Approx(5.0 / 8));
  CHECK(d.basis == Basis::rule);
  CHECK(d.library == Blas::mkl);
  CHECK(decide(split, "AuthenticAMD").library == Blas::openblas);
  // Six of eight is enough.
  CHECK(decide(rounds_with_ratios({1.3, 1.25, 1.2, 1.2, 1.3, 1.2, 0.7, 0.8}), "GenuineIntel").basis == Basis::timed);
}

TEST_CASE("blas decision: a quiet, clear timing is final, and rule, close or loaded ones are timed again") {
  const std::vector<double> clear{1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3}, close(8, 1.04);
  CHECK_FALSE(should_time(stored(clear, "GenuineIntel", 0.02, 0), kLater));
  CHECK(is_final(stored(clear, "GenuineIntel", 0.02, 0)));
  CHECK(should_time(stored(close, "GenuineIntel", 0.02, 0), kLater));       // by rule
  CHECK(should_time(stored(clear, "GenuineIntel", kLoadedShare + 0.1, 0), kLater));  // loaded
  CHECK_FALSE(should_time(stored(clear, "GenuineIntel", kLoadedShare, 0), kLater));  // at the threshold: quiet
  CHECK(should_time(std::nullopt, kLater));                                  // a cold start
}

TEST_CASE("blas decision: re-timing stops after the cap, and not within the same start") {
  const std::vector<double> close(8, 1.04);
  CHECK(should_time(stored(close, "AuthenticAMD", 0.6, kMaxRetimes - 1), kLater));
  CHECK_FALSE(should_time(stored(close, "AuthenticAMD", 0.6, kMaxRetimes), kLater));
  CHECK_FALSE(should_time(stored(close, "AuthenticAMD", 0.6, 0), 1000 + kSameStartS / 2));  // the launcher's own
  const StoredChoice first = after_timing(std::nullopt, stored(close, "AuthenticAMD", 0.6, 0));
  CHECK(first.retimes == 0);
  CHECK(after_timing(first, stored(close, "AuthenticAMD", 0.6, 0)).retimes == 1);
}

TEST_CASE("blas decision: an old cache entry has no evidence and is timed again once") {
  const auto old = choice_from_json({{"openblas", true}, {"speedup", 1.18}});
  REQUIRE(old.has_value());
  CHECK_FALSE(old->has_evidence);
  CHECK(old->decision.library == Blas::openblas);
  CHECK(old->decision.median_ratio == doctest::Approx(1.18));
  CHECK(should_time(old, kLater));
  CHECK(should_time(old, 0));  // it has no time: never taken for this start's own
  CHECK(after_timing(old, stored({1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3, 1.3}, "GenuineIntel", 0.0, 0)).retimes == 1);
  CHECK_FALSE(choice_from_json(nlohmann::json::array()).has_value());
  CHECK_FALSE(choice_from_json({{"library", "mkl"}, {"basis", 3}, {"rounds", 1}}).has_value());  // damaged
}

TEST_CASE("blas decision: an entry keeps its evidence through the cache's JSON") {
  const StoredChoice c = stored({1.05, 0.9, 1.2, 1.3, 0.95, 1.1, 1.0, 1.15}, "AuthenticAMD", 0.4, 2);
  const nlohmann::json j = to_json(c);
  CHECK(j["basis"] == "rule");
  CHECK(j["library"] == "openblas");
  CHECK(j["loaded"] == true);
  CHECK(j["final"] == false);
  CHECK(j["timestamp"] == "1970-01-01T00:16:40Z");
  const auto back = choice_from_json(j);
  REQUIRE(back.has_value());
  CHECK(back->has_evidence);
  CHECK(back->rounds.size() == 8);
  CHECK(back->rounds[2].mkl_s == doctest::Approx(0.012));
  CHECK(back->decision.median_ratio == doctest::Approx(c.decision.median_ratio));
  CHECK(back->others_cpu == doctest::Approx(0.4));
  CHECK(back->retimes == 2);
  CHECK(back->vendor == "AuthenticAMD");
}

TEST_CASE("blas decision: the runtime line says the basis, the load and whether it is timed again") {
  const std::string rule = explain(stored(std::vector<double>(8, 1.04), "GenuineIntel", 0.6, 0), "OpenBLAS x");
  CAPTURE(rule);
  CHECK(rule.find("by rule for an Intel CPU: timed within 4% of OpenBLAS x") == 0);
  CHECK(rule.find("timed under load (other processes used 60% of the CPUs)") != std::string::npos);
  CHECK(rule.find("timed again at the next start") != std::string::npos);
  const std::string timed = explain(stored(std::vector<double>(8, 0.8), "AuthenticAMD", 0.0, 0), "OpenBLAS x");
  CAPTURE(timed);
  CHECK(timed == "timed 1.25x faster here than OpenBLAS x: median of 8 interleaved rounds, 8 of them agree");
  const std::string settled = explain(stored(std::vector<double>(8, 1.04), "AuthenticAMD", 0.0, kMaxRetimes), "MKL");
  CHECK(settled.find("kept after 4 timings") != std::string::npos);
}
