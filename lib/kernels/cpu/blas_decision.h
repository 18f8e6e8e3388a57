// The BLAS choice's decisions, apart from the timing and the cache file (blas_library.cpp): which
// library a set of interleaved rounds picks and on what basis, the rule for a close or disagreeing
// timing, and whether a stored choice is timed again. No clock, no files: unit-tested with made-up
// rounds (tests/unit/test_blas_decision.cpp).
//
// The rule, with its thresholds below: a timing decides only when the median of the rounds' ratios
// t_mkl / t_openblas lies outside [1/1.10, 1.10] and at least 75 % of the rounds fall on the
// median's side of 1. Otherwise the CPU's vendor decides: OpenBLAS on AMD (where MKL runs its
// generic code path), MKL on Intel and anything else. A choice is final once it was timed clearly
// on a quiet machine (other processes used at most a quarter of the CPUs' time while it was timed);
// one by rule, close, or timed under load is timed again at the next start, at most 3 times.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spmd::kernels::cpu {

enum class Blas { mkl, openblas };
enum class Basis { timed, rule };

const char* name_of(Blas library);  // "mkl", "openblas"
const char* name_of(Basis basis);   // "timed", "rule"

// One interleaved pair of rounds: the same products through each library, in seconds.
struct Round {
  double mkl_s = 0;
  double openblas_s = 0;
};

// A median ratio nearer 1 than this is noise on a shared machine, not a faster library.
constexpr double kClearRatio = 1.10;
// The share of rounds that must agree with the median's side, so that a few preempted rounds
// cannot decide.
constexpr double kMinAgreement = 0.75;
// Other processes' share of all online CPUs' time while timing above which the timing was taken
// under load: beyond it our threads lose whole scheduler slices inside a round.
constexpr double kLoadedShare = 0.25;
// How many times a choice that is not final is timed again before it is kept as it is.
constexpr int kMaxRetimes = 3;
// A choice stored this recently is the current start's own: the launcher times before its workers
// start, and ranks started together by srun or torchrun find the first one's.
constexpr double kSameStartS = 60;

struct Decision {
  Blas library = Blas::mkl;
  Basis basis = Basis::rule;
  double median_ratio = 1;  // t_mkl / t_openblas: above 1, OpenBLAS was the faster
  double agreement = 0;     // the share of rounds on the median's side of 1
};

double median_ratio(const std::vector<Round>& rounds);
double agreement(const std::vector<Round>& rounds, double median);
bool is_clear(double median, double agreement);
// The choice where timing cannot tell: by the CPU's vendor_id (/proc/cpuinfo).
Blas rule_for_vendor(const std::string& vendor);
Decision decide(const std::vector<Round>& rounds, const std::string& vendor);

// A choice as the cache keeps it, with its evidence.
struct StoredChoice {
  Decision decision;
  std::vector<Round> rounds;
  std::string vendor;          // "GenuineIntel", "AuthenticAMD", ...
  int threads = 1;             // threads that multiplied at once
  double others_cpu = 0;       // other processes' share of all online CPUs' time during the timing
  double loadavg_per_cpu = 0;  // /proc/loadavg's 1-minute figure over the online CPUs, when timing began
  int retimes = 0;             // timings after the first
  double unix_time = 0;        // when it was timed
  bool has_evidence = true;    // false for an entry written before the evidence was kept
};

bool timed_under_load(const StoredChoice& choice);
// Timed on a quiet machine with a clear margin: never timed again.
bool is_final(const StoredChoice& choice);
// Whether this start times the libraries: yes with no usable entry, or an entry that is neither
// final, this start's own, nor out of re-timings.
bool should_time(const std::optional<StoredChoice>& stored, double now_unix);
// The entry that replaces `previous` after a timing: the new evidence, one more re-timing counted.
StoredChoice after_timing(const std::optional<StoredChoice>& previous, StoredChoice timed);

nlohmann::json to_json(const StoredChoice& choice);
// Nothing for what is not an entry; an entry of the old form {"openblas": bool, "speedup": x} is
// read as a choice without evidence.
std::optional<StoredChoice> choice_from_json(const nlohmann::json& entry);

// Why this library, for the runtime line: "timed 1.23x faster here than OTHER (...)" or "by rule
// for an Intel CPU: timed within 4% of OTHER (...)", and whether it is timed again.
std::string explain(const StoredChoice& choice, const std::string& other_label);

}  // namespace spmd::kernels::cpu
