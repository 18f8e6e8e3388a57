// bench_kernels: the fused elementwise CPU kernels on one activation of a config's shape, against
// the libtorch ops they replace and against a plain multiply (how fast this machine streams the
// same bytes). bias + GELU forward and backward, and dropout drawn in place (p = 0.2) against its
// materialized mask times x, in float32 and bf16; rows x cols defaults to the
// 10.7M config's MLP activation (64 x 256 rows, 4 x 384 wide). The variants alternate round by
// round, so a busy machine slows all alike; medians, GB/s and elements/s.
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "timing.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fused_dropout.h"
#include "kernels/cpu/fused_gelu.h"
#include "kernels/dropout_draws.h"
#include "util/caching_cpu_allocator.h"

namespace {

using spmd::bench::median;
using spmd::bench::ms_of;

struct Variant {
  std::string name;
  double bytes_per_element;  // read + written, as the kernel streams them
  std::function<void()> run;
  std::vector<double> ms;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_kernels: fused CPU elementwise kernels against libtorch's ops"};
  int64_t rows = 16384, cols = 1536, rounds = 15;
  int threads = 0;
  app.add_option("--rows", rows, "activation rows")->check(CLI::PositiveNumber);
  app.add_option("--cols", cols, "activation width")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "timed rounds per variant")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "intra-op threads (0: libtorch's default)");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) at::set_num_threads(threads);
  spmd::install_caching_cpu_allocator();  // as a training run: no page faults on reuse

  at::manual_seed(0);
  std::vector<Variant> variants;
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const std::string d = dtype == at::kFloat ? "fp32" : "bf16";
    const double e = dtype == at::kFloat ? 4 : 2;
    const at::Tensor x = at::randn({rows, cols}).to(dtype);
    const at::Tensor dy = at::randn({rows, cols}).to(dtype);
    const at::Tensor xg = x.clone().requires_grad_(true);
    variants.push_back({d + " gelu forward (ours: y and gelu')", 3 * e, [x] { (void)spmd::kernels::cpu::fused_bias_gelu(x); }, {}});
    variants.push_back({d + " gelu forward (libtorch tanh)", 2 * e, [x] { (void)at::gelu(x, "tanh"); }, {}});
    variants.push_back({d + " gelu forward+backward (ours)", 6 * e, [xg, dy] {
                          const at::Tensor y = spmd::kernels::cpu::fused_bias_gelu(xg);
                          (void)torch::autograd::grad({y}, {xg}, {dy});
                        }, {}});
    const spmd::kernels::DropoutDraws draws({rows, cols}, {rows, cols}, {0, 0}, /*key=*/1234, /*p=*/0.2);
    variants.push_back({d + " dropout (ours: drawn in place)", e + 4, [x, draws] { (void)spmd::kernels::cpu::fused_dropout(x, draws); }, {}});
    variants.push_back({d + " dropout (mask materialized, x * mask)", e + 12, [x, draws] {
                          (void)(x * draws.materialize(x.device()));
                        }, {}});
    variants.push_back({d + " x * dy (streaming reference)", 3 * e, [x, dy] { (void)(x * dy); }, {}});
  }
  for (auto& v : variants) v.run();  // warm the allocator's free lists and the caches' code
  for (int64_t r = 0; r < rounds; ++r)
    for (auto& v : variants) v.ms.push_back(ms_of(v.run));

  const double n = static_cast<double>(rows * cols);
  std::cout << fmt::format("CPU: {}; {} thread(s); {} x {} elements; median of {} rounds\n",
                           spmd::kernels::cpu::cpu_model(), at::get_num_threads(), rows, cols, rounds);
  std::cout << fmt::format("{:<42} {:>9} {:>8} {:>10}\n", "variant", "ms", "GB/s", "Gelem/s");
  for (const auto& v : variants) {
    const double ms = median(v.ms);
    std::cout << fmt::format("{:<42} {:>9.2f} {:>8.1f} {:>10.2f}\n", v.name, ms, n * v.bytes_per_element / ms / 1e6,
                             n / ms / 1e6);
  }
  return 0;
}
