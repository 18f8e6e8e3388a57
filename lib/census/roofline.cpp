// The GPU spec table and the roofline arithmetic of roofline.h.
#include "census/roofline.h"

#include "util/error.h"

namespace spmd::census {

const std::vector<GpuSpec>& gpu_specs() {
  static const std::vector<GpuSpec> kSpecs{{"h100", "H100 SXM", 989, 3.35},
                                           {"h200", "H200", 989, 4.8},
                                           {"a100", "A100 SXM 80GB", 312, 2.039}};
  return kSpecs;
}

const GpuSpec& gpu_spec(const std::string& key) {
  std::string known;
  for (const GpuSpec& g : gpu_specs()) {
    if (g.key == key) return g;
    known += (known.empty() ? "" : ", ") + g.key;
  }
  throw UsageError(fmt::format("no GPU '{}' in the census's table (known: {})", key, known));
}

Roofline roofline(const GpuSpec& gpu, double product_flops, double bytes_outside_products) {
  Roofline r;
  r.product_ms = product_flops / (kProductFraction * gpu.bf16_tflops * 1e12) * 1e3;
  r.memory_ms = bytes_outside_products / (kBandwidthFraction * gpu.hbm_tb_s * 1e12) * 1e3;
  return r;
}

double roofline_mfu(const GpuSpec& gpu, double product_flops, const Roofline& estimate) {
  const double s = estimate.ms() / 1e3;
  return s > 0 ? product_flops / (s * gpu.bf16_tflops * 1e12) : 0;
}

}  // namespace spmd::census
