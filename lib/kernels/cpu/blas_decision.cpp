// The BLAS choice's decisions (blas_decision.h): pure functions of rounds, entries and the time.
#include "kernels/cpu/blas_decision.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace spmd::kernels::cpu {

const char* name_of(Blas library) { return library == Blas::openblas ? "openblas" : "mkl"; }

const char* name_of(Basis basis) { return basis == Basis::timed ? "timed" : "rule"; }

double median_ratio(const std::vector<Round>& rounds) {
  if (rounds.empty()) return 1;
  std::vector<double> ratios;
  for (const Round& r : rounds) ratios.push_back(r.mkl_s / r.openblas_s);
  std::sort(ratios.begin(), ratios.end());
  const size_t mid = ratios.size() / 2;
  return ratios.size() % 2 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
}

double agreement(const std::vector<Round>& rounds, double median) {
  if (rounds.empty()) return 0;
  const bool openblas_side = median > 1;
  const auto agree = std::count_if(rounds.begin(), rounds.end(), [&](const Round& r) {
    return (r.mkl_s / r.openblas_s > 1) == openblas_side;
  });
  return static_cast<double>(agree) / static_cast<double>(rounds.size());
}

bool is_clear(double median, double agreement) {
  return (median > kClearRatio || median < 1 / kClearRatio) && agreement >= kMinAgreement;
}

// MKL dispatches its optimized kernels on Intel CPUs only; on AMD it runs a generic path, and
// OpenBLAS's Zen kernels are the safe side there. Elsewhere MKL, libtorch's own BLAS.
Blas rule_for_vendor(const std::string& vendor) { return vendor == "AuthenticAMD" ? Blas::openblas : Blas::mkl; }

Decision decide(const std::vector<Round>& rounds, const std::string& vendor) {
  Decision d;
  d.median_ratio = median_ratio(rounds);
  d.agreement = agreement(rounds, d.median_ratio);
  if (is_clear(d.median_ratio, d.agreement)) {
    d.basis = Basis::timed;
    d.library = d.median_ratio > 1 ? Blas::openblas : Blas::mkl;
  } else {
    d.basis = Basis::rule;
    d.library = rule_for_vendor(vendor);
  }
  return d;
}

bool timed_under_load(const StoredChoice& choice) { return choice.others_cpu > kLoadedShare; }

bool is_final(const StoredChoice& choice) {
  const Decision& d = choice.decision;
  return choice.has_evidence && d.basis == Basis::timed && is_clear(d.median_ratio, d.agreement) &&
         !timed_under_load(choice);
}

bool should_time(const std::optional<StoredChoice>& stored, double now_unix) {
  if (!stored) return true;                // a cold start
  if (!stored->has_evidence) return true;  // the old form: a single timing that may have been loaded
  if (is_final(*stored)) return false;
  if (stored->unix_time > 0 && now_unix - stored->unix_time < kSameStartS) return false;
  return stored->retimes < kMaxRetimes;  // then it settles, whatever it is
}

StoredChoice after_timing(const std::optional<StoredChoice>& previous, StoredChoice timed) {
  timed.retimes = previous ? previous->retimes + 1 : 0;
  return timed;
}

namespace {

std::string utc_text(double unix_time) {
  const std::time_t t = static_cast<std::time_t>(unix_time);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::optional<Blas> library_named(const std::string& name) {
  if (name == "mkl") return Blas::mkl;
  if (name == "openblas") return Blas::openblas;
  return std::nullopt;
}

std::optional<StoredChoice> choice_with_evidence(const nlohmann::json& entry) {
  const auto library = library_named(entry.at("library").get<std::string>());
  const std::string basis = entry.at("basis").get<std::string>();
  if (!library || (basis != "timed" && basis != "rule")) return std::nullopt;
  StoredChoice c;
  c.decision = {*library, basis == "timed" ? Basis::timed : Basis::rule, entry.at("median_ratio").get<double>(),
                entry.at("agreement").get<double>()};
  for (const auto& r : entry.at("rounds"))
    c.rounds.push_back({r.at("mkl_s").get<double>(), r.at("openblas_s").get<double>()});
  c.vendor = entry.value("vendor", "");
  c.threads = entry.value("threads", 1);
  c.others_cpu = entry.value("others_cpu", 0.0);
  c.loadavg_per_cpu = entry.value("loadavg_per_cpu", 0.0);
  c.retimes = entry.value("retimes", 0);
  c.unix_time = entry.value("unix_time", 0.0);
  return c;
}

// {"openblas": bool, "speedup": x}: one best-of-6 timing per library, one after the other, with
// nothing to say whether the machine was busy.
StoredChoice choice_without_evidence(const nlohmann::json& entry) {
  StoredChoice c;
  const bool openblas = entry.at("openblas").get<bool>();
  const double speedup = entry.value("speedup", 1.0);
  c.decision = {openblas ? Blas::openblas : Blas::mkl, Basis::timed, openblas ? speedup : 1 / speedup, 0};
  c.has_evidence = false;
  return c;
}

std::string vendor_text(const std::string& vendor) {
  if (vendor == "AuthenticAMD") return "an AMD CPU";
  if (vendor == "GenuineIntel") return "an Intel CPU";
  return vendor.empty() ? "a CPU of unknown vendor" : "a " + vendor + " CPU";
}

std::string basis_text(const StoredChoice& c, const std::string& other) {
  const Decision& d = c.decision;
  const double factor = d.median_ratio >= 1 ? d.median_ratio : 1 / d.median_ratio;
  const size_t n = c.rounds.size();
  const long agree = std::lround(d.agreement * static_cast<double>(n));
  if (!c.has_evidence) return fmt::format("timed {:.2f}x faster here than {} once, without evidence", factor, other);
  if (d.basis == Basis::timed)
    return fmt::format("timed {:.2f}x faster here than {}: median of {} interleaved rounds, {} of them agree", factor,
                       other, n, agree);
  if (factor <= kClearRatio)
    return fmt::format("by rule for {}: timed within {:.0f}% of {}", vendor_text(c.vendor), (factor - 1) * 100, other);
  return fmt::format("by rule for {}: rounds disagree against {} (median {:.2f}x, {} of {} on its side)",
                     vendor_text(c.vendor), other, factor, agree, n);
}

}  // namespace

nlohmann::json to_json(const StoredChoice& c) {
  nlohmann::json rounds = nlohmann::json::array();
  for (const Round& r : c.rounds) rounds.push_back({{"mkl_s", r.mkl_s}, {"openblas_s", r.openblas_s}});
  // "loaded" and "final" follow from the rest; they are written for readers (tests, the bench).
  return {{"library", name_of(c.decision.library)}, {"basis", name_of(c.decision.basis)},
          {"median_ratio", c.decision.median_ratio}, {"agreement", c.decision.agreement},
          {"rounds", rounds},                        {"vendor", c.vendor},
          {"threads", c.threads},                    {"others_cpu", c.others_cpu},
          {"loadavg_per_cpu", c.loadavg_per_cpu},    {"loaded", timed_under_load(c)},
          {"final", is_final(c)},                    {"retimes", c.retimes},
          {"unix_time", c.unix_time},                {"timestamp", utc_text(c.unix_time)}};
}

std::optional<StoredChoice> choice_from_json(const nlohmann::json& entry) {
  if (!entry.is_object()) return std::nullopt;
  try {
    if (entry.contains("basis") && entry.contains("rounds")) return choice_with_evidence(entry);
    if (entry.contains("openblas")) return choice_without_evidence(entry);
  } catch (const nlohmann::json::exception&) {
    // A damaged entry is no entry: the libraries are timed again.
  }
  return std::nullopt;
}

std::string explain(const StoredChoice& c, const std::string& other_label) {
  std::string text = basis_text(c, other_label);
  if (timed_under_load(c))
    text += fmt::format("; timed under load (other processes used {:.0f}% of the CPUs)", c.others_cpu * 100);
  if (!is_final(c))
    text += c.retimes < kMaxRetimes ? "; timed again at the next start"
                                    : fmt::format("; kept after {} timings", c.retimes + 1);
  return text;
}

}  // namespace spmd::kernels::cpu
