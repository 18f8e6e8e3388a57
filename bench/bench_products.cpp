// bench_products: a Llama layer's dense products on the CPU, each projection on its own against
// the projections that read the same input as one product (q, k, v; gate, up): the forward, dX and
// dW of kernels::linear_forward / linear_backward (the products the training step runs), GFLOP/s
// each and the layer's total ms. Shapes default to bench/llama_cpu_vs_transformers.sh's 9.5M
// (4096 rows = batch 16 x block 256, 384 wide, 6 / 2 heads of 64, SwiGLU 1024). The variants
// alternate round by round, so a busy machine slows both alike; medians.
#include <iostream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kernels/kernels.h"
#include "util/caching_cpu_allocator.h"
#include "timing.h"

namespace {

using spmd::bench::median;
using spmd::bench::ms_of;

// One group of products of x (rows, K): widths[i] output columns each, run separately or as one.
struct Group {
  std::string name;
  std::vector<int64_t> widths;
};

// Forward, dX and dW of each weight in `widths` (one call each) on x (rows, K).
double products_ms(const at::Tensor& x, const std::vector<at::Tensor>& weights, const std::vector<at::Tensor>& grads) {
  return ms_of([&] {
    for (size_t i = 0; i < weights.size(); ++i) {
      at::Tensor y = spmd::kernels::linear_forward(x, weights[i], at::Tensor());
      spmd::kernels::linear_backward(x, weights[i], grads[i], true, true, false);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_products: a Llama layer's products, each projection alone against q/k/v and gate/up as one"};
  int64_t rows = 4096, embed = 384, heads = 6, kv_heads = 2, head_dim = 64, mlp = 1024, rounds = 9, threads = 2;
  app.add_option("--rows", rows, "tokens per step (batch x block)");
  app.add_option("--embed", embed, "model width");
  app.add_option("--heads", heads, "query heads");
  app.add_option("--kv-heads", kv_heads, "key/value heads");
  app.add_option("--head-dim", head_dim, "head width");
  app.add_option("--mlp", mlp, "SwiGLU width");
  app.add_option("--rounds", rounds, "interleaved rounds (median)");
  app.add_option("--threads", threads, "intra-op threads");
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(static_cast<int>(threads));
  spmd::install_caching_cpu_allocator();  // as a training run: no page faults on reuse
  const std::vector<Group> groups{{"q, k, v", {heads * head_dim, kv_heads * head_dim, kv_heads * head_dim}},
                                  {"gate, up", {mlp, mlp}}};
  const at::Tensor x = at::randn({rows, embed});
  fmt::print("rows {} x embed {}, {} thread(s), {} rounds; forward + dX + dW per product\n", rows, embed, threads,
             rounds);
  fmt::print("| products | separate ms | one product ms | separate GFLOP/s | one GFLOP/s | separate/one |\n");
  fmt::print("|---|---|---|---|---|---|\n");
  for (const Group& g : groups) {
    std::vector<at::Tensor> ws, gs;
    int64_t total = 0;
    for (int64_t n : g.widths) {
      ws.push_back(at::randn({embed, n}) * 0.02);
      gs.push_back(at::randn({rows, n}));
      total += n;
    }
    const std::vector<at::Tensor> fused_w{at::cat(ws, 1)}, fused_g{at::cat(gs, 1)};
    std::vector<double> separate, fused;
    products_ms(x, ws, gs);  // warm the allocator and the BLAS
    products_ms(x, fused_w, fused_g);
    for (int64_t r = 0; r < rounds; ++r) {
      separate.push_back(products_ms(x, ws, gs));
      fused.push_back(products_ms(x, fused_w, fused_g));
    }
    const double flops = 6.0 * static_cast<double>(rows * embed * total);
    const double s = median(separate), f = median(fused);
    fmt::print("| {} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.3f} |\n", g.name, s, f, flops / s / 1e6, flops / f / 1e6,
               s / f);
  }
  return 0;
}
