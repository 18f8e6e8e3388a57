// The text and JSON forms of census_report.h.
#include "census/census_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace spmd::census {

namespace {

constexpr double kGB = 1e9;

void print_kinds(const CensusSummary& sum) {
  fmt::print("  by op kind (most estimated time first)\n");
  fmt::print("    {:<52} {:>6} {:<28} {:>9} {:>9} {:>9} {:>8}\n", "op", "calls", "dtypes", "GFLOP", "GB read",
             "GB write", "est ms");
  for (const KindRow& k : sum.kinds)
    fmt::print("    {:<52} {:>6} {:<28} {:>9.2f} {:>9.3f} {:>9.3f} {:>8.3f}\n", k.name, k.calls,
               fmt::format("{}", fmt::join(k.dtypes, ",")), k.flops / 1e9, static_cast<double>(k.bytes_read) / kGB,
               static_cast<double>(k.bytes_written) / kGB, k.time.ms());
}

void print_regions(const CensusSummary& sum) {
  fmt::print("  by region (user scopes in forward; backward goes to its forward op's region)\n");
  fmt::print("    {:<12} {:>8} {:>10} {:>12} {:>10} {:>10} {:>8}\n", "region", "launches", "GFLOP", "GB outside",
             "product ms", "memory ms", "est ms");
  for (const RegionRow& r : sum.regions)
    fmt::print("    {:<12} {:>8} {:>10.2f} {:>12.3f} {:>10.3f} {:>10.3f} {:>8.3f}\n", r.name, r.launches, r.flops / 1e9,
               static_cast<double>(r.bytes_outside) / kGB, r.time.product_ms, r.time.memory_ms, r.time.ms());
}

void print_memory(const CensusSummary& sum) {
  std::vector<std::string> syncs;
  for (const auto& [name, n] : sum.host_syncs) syncs.push_back(fmt::format("{} {}", name, n));
  fmt::print("  host syncs         {}\n", syncs.empty() ? std::string("none") : fmt::format("{}", fmt::join(syncs, ", ")));
  if (!sum.backward_ran) {
    fmt::print("  saved for backward -  (no backward ran)\n");
    return;
  }
  std::vector<std::string> by_dtype;
  for (const auto& [dtype, bytes] : sum.saved_bytes_by_dtype)
    by_dtype.push_back(fmt::format("{} {:.1f} MiB", dtype, static_cast<double>(bytes) / (1 << 20)));
  fmt::print("  saved for backward {} (forward outputs alive when backward began: the graph's and the caches')\n",
             by_dtype.empty() ? std::string("none") : fmt::format("{}", fmt::join(by_dtype, ", ")));
  std::vector<ShapeCount> top = sum.saved;
  std::stable_sort(top.begin(), top.end(), [](const ShapeCount& a, const ShapeCount& b) { return a.bytes > b.bytes; });
  for (size_t i = 0; i < top.size() && i < 8; ++i)
    fmt::print("    {:>9.1f} MiB  {:>4} x {} {} ({})\n", static_cast<double>(top[i].bytes) / (1 << 20), top[i].count,
               top[i].dtype, fmt::format("[{}]", fmt::join(top[i].shape, ", ")), top[i].where);
}

void print_logits(const CensusSummary& sum) {
  const LogitPasses& p = sum.logits;
  if (p.chunks == 0) {
    fmt::print("  logits             no head product wrote a (rows, {}) chunk\n", p.width);
    return;
  }
  fmt::print("  logits             {} chunk(s) of width {}: {} launches touch them, {:.1f} passes per chunk\n",
             p.chunks, p.width, p.launches, p.per_chunk());
}

nlohmann::json shapes_json(const std::vector<ShapeCount>& list, const char* where) {
  nlohmann::json out = nlohmann::json::array();
  for (const ShapeCount& s : list)
    out.push_back({{where, s.where}, {"dtype", s.dtype}, {"shape", s.shape}, {"count", s.count}, {"bytes", s.bytes}});
  return out;
}

}  // namespace

void print_census(const CensusSummary& sum) {
  fmt::print("census of one training step's ops, costed on {} ({:.0f} TFLOP/s dense bf16, {} TB/s): products at "
             "{:.0f} % of the peak, everything else at {:.0f} % of the bandwidth; causal attention counts the visible "
             "half (4 B H T S D / 2 forward, 2.5x that backward)\n",
             sum.gpu.name, sum.gpu.bf16_tflops, sum.gpu.hbm_tb_s, 100 * kProductFraction, 100 * kBandwidthFraction);
  print_kinds(sum);
  print_regions(sum);
  print_memory(sum);
  print_logits(sum);
  if (sum.off_thread_ops > 0)
    fmt::print("  not counted        {} ops begun on other threads outside any recorded op (the data loader's, "
               "CPU kernels' parallel regions)\n",
               sum.off_thread_ops);
  fmt::print("{}\n", census_line(sum));
}

std::string census_line(const CensusSummary& sum) {
  return fmt::format("census: {:.1f} GB outside products, {:.2f} TFLOP in products, {} launches, {:.1f} ms on {} "
                     "({:.1f} % MFU)",
                     static_cast<double>(sum.bytes_outside) / kGB, sum.product_flops / 1e12, sum.launches,
                     sum.estimate.ms(), sum.gpu.name, 100 * sum.mfu);
}

nlohmann::json census_json(const CensusSummary& sum) {
  nlohmann::json kinds = nlohmann::json::array(), regions = nlohmann::json::array();
  for (const KindRow& k : sum.kinds)
    kinds.push_back({{"name", k.name}, {"calls", k.calls}, {"dtypes", k.dtypes}, {"flops", k.flops},
                     {"bytes_read", k.bytes_read}, {"bytes_written", k.bytes_written}, {"product", k.product},
                     {"estimate_ms", k.time.ms()}});
  for (const RegionRow& r : sum.regions)
    regions.push_back({{"name", r.name}, {"launches", r.launches}, {"flops", r.flops},
                       {"bytes_outside_products", r.bytes_outside}, {"estimate_ms", r.time.ms()}});
  int64_t syncs = 0;
  for (const auto& [name, n] : sum.host_syncs) syncs += n;
  return {{"gpu", {{"key", sum.gpu.key}, {"name", sum.gpu.name}, {"bf16_tflops", sum.gpu.bf16_tflops},
                   {"hbm_tb_s", sum.gpu.hbm_tb_s}, {"product_fraction", kProductFraction},
                   {"bandwidth_fraction", kBandwidthFraction}}},
          {"launches", sum.launches},
          {"product_flops", sum.product_flops},
          {"bytes_outside_products", sum.bytes_outside},
          {"estimate_ms", sum.estimate.ms()},
          {"product_ms", sum.estimate.product_ms},
          {"memory_ms", sum.estimate.memory_ms},
          {"mfu", sum.mfu},
          {"ops", kinds},
          {"regions", regions},
          {"host_syncs", sum.host_syncs},
          {"host_sync_count", syncs},
          {"backward_ran", sum.backward_ran},
          {"saved_bytes_by_dtype", sum.saved_bytes_by_dtype},
          {"saved", shapes_json(sum.saved, "region")},
          {"block_forward_outputs", shapes_json(sum.block_outputs, "op")},
          {"logits", {{"width", sum.logits.width}, {"chunks", sum.logits.chunks}, {"launches", sum.logits.launches},
                      {"passes_per_chunk", sum.logits.per_chunk()}}},
          {"off_thread_ops", sum.off_thread_ops},
          {"line", census_line(sum)}};
}

}  // namespace spmd::census
