// bench_optimizer: the optimizer step and the gradient norm of a config's GPT-2 on the CPU, ours
// against libtorch's. AdamW: our fused CPU kernel (AdamW::step, what a CPU run uses) against
// at::_fused_adamw_ (AdamW::step_on_device, what a GPU run uses). Norm: our fused loop
// (kernels::sum_of_squares on the CPU) against at::_foreach_norm in double. The variants
// alternate round by round, so a busy machine slows both alike; medians and their ratio.
#include <iostream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ops/_foreach_norm.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "timing.h"
#include "config/config.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/kernels.h"
#include "model/params.h"
#include "optim/adamw.h"
#include "util/error.h"

namespace {

using spmd::bench::median;
using spmd::bench::ms_of;

// One parameter set with gradients, and its optimizer.
struct Model {
  std::vector<at::Tensor> params;
  std::unique_ptr<spmd::AdamW> adamw;
};

Model make_model(const spmd::Config& config) {
  Model m;
  std::vector<bool> decay;
  at::manual_seed(0);
  for (const auto& p : spmd::param_table(config.model, config.model.vocab_size)) {
    m.params.push_back((at::randn(p.shape) * 0.02).set_requires_grad(true));
    m.params.back().mutable_grad() = at::randn(p.shape) * 1e-3;
    decay.push_back(p.weight_decay);
  }
  m.adamw = std::make_unique<spmd::AdamW>(m.params, decay, config.train);
  return m;
}

void report(const std::string& what, const std::string& a, const std::vector<double>& ta, const std::string& b,
            const std::vector<double>& tb) {
  fmt::print("  {:<8} {:<34} {:8.3f} ms   {:<34} {:8.3f} ms   ratio {:.2f}\n", what, a, median(ta), b, median(tb),
             median(tb) / median(ta));
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path = "configs/bench/shakespeare-char.yaml";
  int rounds = 30, threads = 0;
  CLI::App app{"Time AdamW and the gradient norm on the CPU: ours against libtorch's fused/foreach forms."};
  app.add_option("--config", config_path, "The model whose parameters are updated")->capture_default_str();
  app.add_option("--rounds", rounds, "Alternating rounds (one step of each variant per round)")->capture_default_str();
  app.add_option("--threads", threads, "Intra-op threads (0: libtorch's default)")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (threads > 0) at::set_num_threads(threads);
    const spmd::Config config = spmd::load_config(config_path);
    Model ours = make_model(config), fused = make_model(config);
    int64_t numel = 0;
    for (const auto& p : ours.params) numel += p.numel();
    fmt::print("bench_optimizer: {} | {} parameters in {} tensors | {} thread(s) | {} | {} rounds\n", config_path,
               numel, ours.params.size(), at::get_num_threads(), spmd::kernels::cpu::cpu_model(), rounds);
    const at::Tensor clip = at::full({}, 0.5, at::kDouble), apply = at::ones({}, at::kBool);
    std::vector<at::Tensor> grads;
    for (const auto& p : ours.params) grads.push_back(p.grad());
    std::vector<double> t_ours, t_fused, t_loop, t_foreach;
    double sink = 0;
    for (int r = 0; r < rounds + 2; ++r) {  // the first two rounds warm up
      const double a = ms_of([&] { ours.adamw->step(1e-4, 0.5); });
      const double b = ms_of([&] { fused.adamw->step_on_device(1e-4, clip, apply); });
      const double c = ms_of([&] { sink += spmd::kernels::sum_of_squares(grads, at::kCPU).item<double>(); });
      const double d = ms_of([&] {
        sink += at::stack(at::_foreach_norm(grads, 2, at::kDouble)).square().sum().item<double>();
      });
      if (r < 2) continue;
      t_ours.push_back(a);
      t_fused.push_back(b);
      t_loop.push_back(c);
      t_foreach.push_back(d);
    }
    report("AdamW", "ours (fused CPU kernel)", t_ours, "at::_fused_adamw_", t_fused);
    report("norm", "ours (fused sum of squares)", t_loop, "at::_foreach_norm (double)", t_foreach);
    fmt::print("  (ratio = libtorch's / ours: above 1, ours is faster; checksum {:.3g})\n", sink);
    return 0;
  } catch (const spmd::UsageError& e) {
    std::cerr << "bench_optimizer: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "bench_optimizer: " << e.what() << "\n";
    return 1;
  }
}
