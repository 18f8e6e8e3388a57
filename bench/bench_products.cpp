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
#include <torch/csrc/autograd/autograd.h>
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
  int64_t batch = 16, rows = 4096, embed = 384, heads = 6, kv_heads = 2, head_dim = 64, mlp = 1024, rounds = 9, threads = 2;
  app.add_option("--rows", rows, "tokens per step (batch x block)");
  app.add_option("--batch", batch, "batch rows (the attention's block is rows / batch)");
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
  // Each of the layer's four products (q, k, v and gate, up as one) by direction: where the step's
  // product time goes, against the 2048^3 peak bench_train measures.
  struct Product {
    std::string name;
    int64_t k, n;  // x (rows, k) . w (k, n)
  };
  const std::vector<Product> products{{"qkv", embed, (heads + 2 * kv_heads) * head_dim},
                                      {"o", heads * head_dim, embed},
                                      {"gate_up", embed, 2 * mlp},
                                      {"down", mlp, embed}};
  fmt::print("\n| product | forward GFLOP/s | dX GFLOP/s | dW GFLOP/s | ms (all three) |\n|---|---|---|---|---|\n");
  double total_ms = 0;
  for (const Product& p : products) {
    const at::Tensor xp = at::randn({rows, p.k}), w = at::randn({p.k, p.n}) * 0.02, dy = at::randn({rows, p.n});
    std::vector<double> fwd, dx, dw;
    for (int64_t r = 0; r <= rounds; ++r) {  // round 0 warms up
      const double f = ms_of([&] { spmd::kernels::linear_forward(xp, w, at::Tensor()); });
      const double a = ms_of([&] { spmd::kernels::linear_backward(xp, w, dy, true, false, false); });
      const double b = ms_of([&] { spmd::kernels::linear_backward(xp, w, dy, false, true, false); });
      if (r == 0) continue;
      fwd.push_back(f);
      dx.push_back(a);
      dw.push_back(b);
    }
    const double gflop = 2.0 * static_cast<double>(rows * p.k * p.n) / 1e6;  // per direction, in ms units
    const double ms = median(fwd) + median(dx) + median(dw);
    total_ms += ms;
    fmt::print("| {} ({} x {} x {}) | {:.1f} | {:.1f} | {:.1f} | {:.2f} |\n", p.name, rows, p.k, p.n,
               gflop / median(fwd), gflop / median(dx), gflop / median(dw), ms);
  }
  fmt::print("a layer's products: {:.1f} ms\n", total_ms);
  // The layer's causal attention (the grouped kernel on the packed q, k, v), forward and backward:
  // 6 T^2 D FLOPs per head and row (half of 12 T^2 D: the causal half is skipped).
  const int64_t block = rows / batch;
  const at::Tensor packed = at::randn({batch, block, heads + 2 * kv_heads, head_dim}).requires_grad_(true);
  const at::Tensor dy = at::randn({batch, block, heads, head_dim});
  std::vector<double> fwd, bwd;
  for (int64_t r = 0; r <= rounds; ++r) {
    at::Tensor y;
    const double f = ms_of([&] { y = spmd::kernels::grouped_causal_attention(packed, kv_heads, {}, at::kFloat); });
    const double b = ms_of([&] { torch::autograd::grad({y}, {packed}, {dy}); });
    if (r == 0) continue;
    fwd.push_back(f);
    bwd.push_back(b);
  }
  const double attention_gflop = 6.0 * static_cast<double>(batch * heads * block * block * head_dim) / 1e6;
  fmt::print("a layer's attention (batch {} x block {}): forward {:.2f} ms, backward {:.2f} ms, {:.1f} GFLOP/s "
             "over the causal half\n",
             batch, block, median(fwd), median(bwd), attention_gflop / (median(fwd) + median(bwd)));
  return 0;
}
