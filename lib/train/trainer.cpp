// The training loop, readable top to bottom: step -> log -> eval, until train.steps.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "ckpt/checkpoint.h"
#include "train/metrics.h"
#include "train/stop_signal.h"
#include "train/train_state.h"
#include "util/caching_cpu_allocator.h"
#include "util/error.h"

namespace spmd {

namespace {
// The initialized global parameters as raw little-endian float32 files (vocab padding trimmed).
void dump_parameters(const ShardedModel& model, const std::string& dir) {
  std::vector<at::Tensor> full;
  for (size_t i = 0; i < model.params().size(); ++i) full.push_back(model.gather_full(i));  // collective
  if (model.comm().rank() != 0) return;
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < full.size(); ++i) {
    const auto& info = model.layout().params[i].info;
    at::Tensor t = full[i];
    for (size_t d = 0; d < info.logical.size(); ++d)
      if (info.logical[d] == "vocab") t = t.narrow(static_cast<int64_t>(d), 0, model.layout().model.vocab_size);
    t = t.contiguous();
    std::ofstream out(dir + "/" + info.name + ".f32", std::ios::binary);
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * 4));
  }
}

// Tensor memory per rank (the caching allocator's counts; max over ranks): the peak, and what the
// autograd graph held between forward and backward in the last step.
void report_memory(TrainState& state, int64_t graph_bytes) {
  at::Tensor bytes = at::tensor({static_cast<double>(caching_cpu_allocator_stats().peak_live_bytes),
                                 static_cast<double>(graph_bytes)}, at::kDouble);
  state.comm->world().all_reduce_max(bytes);
  if (state.rank() == 0)
    fmt::print("tensor memory per rank (max): peak {:.1f} MiB, held for backward {:.1f} MiB "
               "(peak_tensor_bytes={:.0f} graph_bytes={:.0f})\n",
               bytes[0].item<double>() / (1 << 20), bytes[1].item<double>() / (1 << 20), bytes[0].item<double>(),
               bytes[1].item<double>());
}

}  // namespace

int run_training(const Config& config, const RendezvousInfo& rendezvous, const TrainOptions& options) {
  const auto& tc = config.train;
  TrainState state = build_train_state(config, rendezvous, options.single_process);
  const bool leader = state.rank() == 0;
  std::unique_ptr<MetricsLog> metrics = leader ? std::make_unique<MetricsLog>(config.output.dir) : nullptr;
  if (!options.dump_init_dir.empty()) dump_parameters(*state.model, options.dump_init_dir);
  if (options.resume) {
    const std::string path = resolve_resume_path(config, options.resume_path);
    restore_checkpoint(state, path);
    if (leader) fmt::print("resumed from {} at step {}\n", path, state.step);
  }
  const bool checkpointing = !config.checkpoint.dir.empty();
  int64_t last_saved_step = options.resume ? state.step : -1;
  auto checkpoint = [&]() {
    if (state.step == last_saved_step) return;
    last_saved_step = state.step;
    const auto start = std::chrono::steady_clock::now();
    std::string dir = save_checkpoint(state, state.step == options.crash_during_save_at_step);
    if (leader)
      fmt::print("checkpoint {} written in {:.2f} s\n", dir,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };

  const int64_t tokens_per_step = config.data.batch_size * config.model.block_size;
  if (leader)
    fmt::print("spmd-train: mesh {} | {} ranks | data-parallel {} | {} params | params+grads+AdamW per rank: "
               "state_bytes_per_rank={} | gradient_buckets={}\n",
               state.model->layout().mesh.describe(), state.model->layout().mesh.size(), state.dp_size(),
               gpt2_num_params(config.model),
               state.model->local_param_bytes() * 2 + state.optimizer->state_bytes(), state.grad_sync->num_buckets());

  // Every rank must agree on stopping (a signal may reach them at different steps): the max of
  // their requests is all-reduced after each step.
  auto agreed_stop_signal = [&]() {
    at::Tensor requested = at::full({1}, static_cast<float>(stop_signal_received()));
    state.comm->world().all_reduce_max(requested);
    return static_cast<int>(requested.item<float>());
  };

  const auto run_start = std::chrono::steady_clock::now();
  const int64_t first_step = state.step;
  double last_loss = NAN;
  int64_t graph_bytes = -1;
  while (state.step < tc.steps) {
    const int64_t step = state.step;
    StepResult r = train_step(state, step == options.inject_nan_at_step);
    graph_bytes = r.graph_bytes;
    if (r.skipped) {
      if (leader) fmt::print("step {}: non-finite loss or gradient; step skipped\n", step);
      continue;
    }
    last_loss = r.loss;
    const bool eval_now = state.val_data && ((step + 1) % tc.eval_every == 0 || step + 1 == tc.steps);
    const bool log_now = eval_now || step % tc.log_every == 0 || step + 1 == tc.steps;
    const double val_loss = eval_now ? evaluate(state) : NAN;
    if (leader && log_now) {
      const double tokens_per_s = static_cast<double>(tokens_per_step) / (r.timings.total_ms / 1000.0);
      nlohmann::json record{{"step", step},           {"loss", r.loss},       {"lr", r.lr},
                            {"grad_norm", r.grad_norm}, {"tokens_per_s", tokens_per_s}, {"step_ms", r.timings.total_ms}};
      if (eval_now) record["val_loss"] = val_loss;
      metrics->write(record);
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      const double eta = elapsed / static_cast<double>(step + 1 - first_step) * static_cast<double>(tc.steps - step - 1);
      fmt::print("step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | {:.0f} tok/s | {:.1f} ms | ETA {}\n", step + 1, tc.steps,
                 r.loss, eval_now ? fmt::format(" | val {:.4f}", val_loss) : std::string(), r.lr, tokens_per_s,
                 r.timings.total_ms, format_duration(eta));
      std::fflush(stdout);
    }
    if (checkpointing && config.checkpoint.every > 0 && state.step % config.checkpoint.every == 0) checkpoint();
    if (int sig = agreed_stop_signal()) {
      if (leader) fmt::print("stopping after step {} on {}\n", state.step, strsignal(sig));
      if (checkpointing) checkpoint();
      std::fflush(stdout);
      return 128 + sig;
    }
  }
  if (checkpointing) checkpoint();  // the final state, unless just saved
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (leader) fmt::print("done: {} steps in {}, final loss {:.4f}\n", tc.steps - first_step, format_duration(total_s), last_loss);
  if (graph_bytes >= 0) report_memory(state, graph_bytes);
  if (const auto& p = state.model->fsdp_prefetcher(); leader && p.total_uses() > 0)
    fmt::print("FSDP all-gathers: {} of {} weight uses served by a gather started during the previous layer "
               "(fsdp_prefetched={} fsdp_uses={})\n",
               p.prefetched_uses(), p.total_uses(), p.prefetched_uses(), p.total_uses());
  state.comm->world().barrier();
  return 0;
}

}  // namespace spmd
