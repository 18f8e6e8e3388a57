// A GPU's spec sheet and the roofline estimate of a step on it: the products at a fraction of the
// dense bf16 peak, everything else at a fraction of the memory bandwidth, one after the other.
#pragma once
#include <string>
#include <vector>

namespace spmd::census {

struct GpuSpec {
  std::string key;     // "h100", as --census takes it
  std::string name;    // "H100 SXM"
  double bf16_tflops;  // dense, without sparsity
  double hbm_tb_s;
};

// The products reach this share of the spec peak, the rest this share of the bandwidth: what
// well-tuned kernels sustain on these parts (cuBLAS and FlashAttention; elementwise kernels).
constexpr double kProductFraction = 0.75;
constexpr double kBandwidthFraction = 0.80;

// H100 SXM, H200 and A100 SXM 80GB, from NVIDIA's data sheets.
const std::vector<GpuSpec>& gpu_specs();
// The spec of a key of gpu_specs(); throws UsageError naming the keys for any other.
const GpuSpec& gpu_spec(const std::string& key);

struct Roofline {
  double product_ms = 0;  // FLOPs at kProductFraction of the peak
  double memory_ms = 0;   // bytes outside products at kBandwidthFraction of the bandwidth
  double ms() const { return product_ms + memory_ms; }
};

Roofline roofline(const GpuSpec& gpu, double product_flops, double bytes_outside_products);
// The model FLOP utilisation of that estimate: product FLOPs over the step's time at the peak.
double roofline_mfu(const GpuSpec& gpu, double product_flops, const Roofline& estimate);

}  // namespace spmd::census
