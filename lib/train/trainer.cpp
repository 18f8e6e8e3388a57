// The training loop, readable top to bottom: step -> log -> eval, until train.steps.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_import.h"
#include "comm/backend.h"
#include "data/dataset_tokenizer.h"
#include "generate/generate.h"
#include "generate/sample_run.h"
#include "parallel/pipeline_schedule.h"
#include "monitor/loss_plot.h"
#include "monitor/metrics.h"
#include "kernels/cpu/blas_library.h"
#include "train/stop_signal.h"
#include "train/train_state.h"
#include "util/caching_cpu_allocator.h"
#include "util/durable_file.h"
#include "util/error.h"
#include "util/test_hooks.h"

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
    if (info.padded_dim >= 0) t = t.narrow(info.padded_dim, 0, info.unpadded_size);
    t = t.to(at::kCPU).contiguous();
    std::ofstream out(dir + "/" + info.name + ".f32", std::ios::binary);
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * 4));
  }
}

// Tensor memory per rank (the caching allocator's counts; max over ranks, and per pipeline stage):
// the peak, and what the autograd graphs held between forward and backward in the last step.
// Goes into the summary.
void report_memory(TrainState& state, int64_t graph_bytes, nlohmann::json& summary) {
  at::Tensor mine = at::tensor({static_cast<double>(caching_cpu_allocator_stats().peak_live_bytes),
                                static_cast<double>(graph_bytes)}, at::kDouble).reshape({1, 2});
  const at::Tensor all = state.comm->control().all_gather(mine, 0);  // (ranks, 2)
  const at::Tensor most = std::get<0>(all.max(0));
  summary["peak_tensor_bytes"] = most[0].item<double>();
  summary["graph_bytes"] = most[1].item<double>();
  const auto& layout = state.model->layout();
  std::vector<double> per_stage(static_cast<size_t>(layout.pipeline.stages()), 0.0);
  for (int64_t r = 0; r < all.size(0); ++r) {
    double& stage = per_stage[static_cast<size_t>(layout.stage_of(r))];
    stage = std::max(stage, all[r][1].item<double>());
  }
  summary["graph_bytes_per_stage"] = per_stage;
  if (state.rank() == 0)
    fmt::print("tensor memory per rank (max): peak {:.1f} MiB, held for backward {:.1f} MiB\n",
               most[0].item<double>() / (1 << 20), most[1].item<double>() / (1 << 20));
}

// The pipeline in one line, when there is one.
void print_pipeline(const Config& config, const PipelineLayout& pipe) {
  if (pipe.stages() < 2) return;
  std::vector<int64_t> blocks;
  for (int64_t s = 0; s < pipe.stages(); ++s) blocks.push_back(pipe.blocks_of_stage(s));
  const PipelineShape shape{config.runtime.pipeline_schedule, pipe.stages(), pipe.chunks, config.train.microbatches};
  fmt::print("pipeline: {} stages over mesh axis '{}'{}, blocks per stage [{}] | {} schedule, {} microbatches | ideal "
             "bubble {:.1f}%\n",
             pipe.stages(), pipe.axis, pipe.chunks > 1 ? fmt::format(" x {} chunks", pipe.chunks) : "",
             fmt::join(blocks, ", "), config.runtime.pipeline_schedule, config.train.microbatches,
             100 * bubble_fraction(shape));
}

// Facts about the run for programs (tests, scripts): output.dir/summary.json, written by rank 0
// at the end of a run or a stop. The progress lines are for people.
void write_summary(const Config& config, const nlohmann::json& summary) {
  write_file_durably(config.output.dir + "/summary.json", summary.dump(1) + "\n");
}

// train.sample_every: the tokenizer beside data.train (UsageError at the start when there is none).
DatasetMeta training_tokenizer(const Config& config) {
  const std::string meta = dataset_meta_path(config.data.train);
  SPMD_CHECK(!meta.empty(),
             "train.sample_every needs the tokenizer of data.train ({}): no meta.json beside it; prepare the data with "
             "spmd-prepare, or set train.sample_every: 0",
             config.data.train);
  return read_meta(meta);
}

// A short text from the model as it is now (llm.c prints one while it trains). Every rank takes
// part in the forward passes; rank 0 prints.
void print_sample(TrainState& state, const DatasetMeta& tokenizer) {
  GenerateOptions options;
  options.tokens = 64;
  options.vocab_size = tokenizer.vocab_size;
  options.sampling.seed = static_cast<uint64_t>(state.config.train.seed + state.step);
  const std::vector<int64_t> prompt = prompt_tokens(tokenizer, "");
  std::vector<int64_t> tokens = generate(*state.model, *state.gpt, prompt, options, nullptr);
  tokens.erase(tokens.begin(), tokens.begin() + static_cast<int64_t>(prompt.size()));
  if (state.rank() == 0) fmt::print("sample after step {}:\n{}\n", state.step, decode(tokenizer, tokens));
}

// output.dir/loss.svg: the run's loss curve, titled with its config file and mesh.
void plot_losses(const Config& config, const TrainState& state, const MetricsLog& metrics) {
  const std::string name = std::filesystem::path(config.source_path).filename().string();
  const std::string title = fmt::format("{}{}mesh {}", name, name.empty() ? "" : " | ", state.model->layout().mesh.describe());
  write_loss_plot(metrics.path(), config.output.dir + "/loss.svg", title);
}

}  // namespace

int run_training(const Config& config, const RendezvousInfo& rendezvous, const TrainOptions& options) {
  const auto& tc = config.train;
  TrainState state = build_train_state(config, rendezvous, options.single_process);
  const bool leader = state.rank() == 0;
  // "" when not resuming, or --resume auto found no checkpoint yet.
  const std::string resume_path = options.resume ? resolve_resume_path(config, options.resume_path) : "";
  const bool resuming = !resume_path.empty();
  if (options.resume && !resuming && leader)
    fmt::print("--resume auto: no checkpoint in {} yet, starting from step 0\n", config.checkpoint.dir);
  if (!resuming && !config.train.init_from.empty()) {  // when resuming, the checkpoint wins
    load_hf_checkpoint(*state.model, config.train.init_from);
    if (leader) fmt::print("initialized from Hugging Face GPT-2 checkpoint {}\n", config.train.init_from);
  }
  if (!test_hooks().dump_init_dir.empty()) dump_parameters(*state.model, test_hooks().dump_init_dir);
  CheckpointState checkpointed = state.checkpoint_view();
  if (resuming) {
    restore_checkpoint(checkpointed, resume_path);
    if (leader) fmt::print("resumed from {} at step {}\n", resume_path, state.step);
  }
  std::unique_ptr<MetricsLog> metrics =
      leader ? std::make_unique<MetricsLog>(config.output.dir, resuming ? state.step : -1) : nullptr;
  const bool checkpointing = !config.checkpoint.dir.empty();
  int64_t last_saved_step = resuming ? state.step : -1;
  auto checkpoint = [&]() {
    if (state.step == last_saved_step) return;
    last_saved_step = state.step;
    const auto start = std::chrono::steady_clock::now();
    std::string dir = save_checkpoint(checkpointed);
    if (leader)
      fmt::print("checkpoint {} written in {:.2f} s\n", dir,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };

  const int64_t tokens_per_step = config.data.batch_size * config.model.block_size;
  const int64_t state_bytes = state.model->local_param_bytes() * 2 + state.optimizer->state_bytes();
  nlohmann::json summary{{"device", state.comm->device().str()},  {"backend", state.comm->runtime().backend},
                         {"ranks", state.model->layout().mesh.size()}, {"data_parallel", state.dp_size()},
                         {"context_parallel", state.model->layout().cp_size()},
                         {"params", gpt2_num_params(config.model)}, {"state_bytes_per_rank", state_bytes},
                         {"gradient_buckets", state.grad_sync->num_buckets()},
                         {"blas", kernels::cpu::blas_description()}};
  if (leader)
    fmt::print("spmd-train: mesh {} | {} ranks on {} over {} | data-parallel {} | {} params | params+grads+AdamW "
               "per rank {:.1f} MiB | {} gradient bucket(s)\n",
               state.model->layout().mesh.describe(), state.model->layout().mesh.size(), state.comm->device().str(),
               state.comm->runtime().backend, state.dp_size(), gpt2_num_params(config.model),
               static_cast<double>(state_bytes) / (1 << 20), state.grad_sync->num_buckets());
  if (leader) print_pipeline(config, state.model->layout().pipeline);
  summary["pipeline_stages"] = state.model->layout().pipeline.stages();

  // Every rank must agree on stopping (a signal may reach them at different steps): the max of
  // their requests is all-reduced after each step, over the CPU control group (no GPU wait).
  auto agreed_stop_signal = [&]() {
    at::Tensor requested = at::full({1}, static_cast<float>(stop_signal_received()));
    state.comm->control().all_reduce_max(requested);
    return static_cast<int>(requested.item<float>());
  };

  std::optional<DatasetMeta> sample_tokenizer;
  if (tc.sample_every > 0) sample_tokenizer = training_tokenizer(config);
  const auto run_start = std::chrono::steady_clock::now();
  const int64_t first_step = state.step;
  double last_loss = NAN;
  int64_t graph_bytes = -1;
  // Steps and their host-side time since the last log line. On CUDA a step's host time is only
  // its launch time, but reading the numbers at the log step waits for all of them, so the sum
  // over the interval is the interval's wall time.
  int64_t interval_steps = 0;
  double interval_ms = 0;
  while (state.step < tc.steps) {
    const int64_t step = state.step;
    if (test_hooks().sigkill_at_step == step && test_hooks().sigkill_rank == state.rank()) raise(SIGKILL);  // tests: a crash
    const auto step_start = std::chrono::steady_clock::now();
    StepResult r = train_step(state);
    graph_bytes = r.graph_bytes;
    if (r.skipped) {
      if (leader) fmt::print("step {}: non-finite loss or gradient; step skipped\n", step);
      continue;
    }
    const bool eval_now = state.val_data && ((step + 1) % tc.eval_every == 0 || step + 1 == tc.steps);
    const bool log_now = eval_now || step % tc.log_every == 0 || step + 1 == tc.steps;
    if (log_now || state.reads_every_step()) last_loss = r.loss.item<double>();  // a sync on CUDA: log steps only
    const int64_t skipped = log_now ? check_health(state) : 0;
    ++interval_steps;
    interval_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start).count();
    const double val_loss = eval_now ? evaluate(state) : NAN;
    if (leader && skipped > 0) fmt::print("{} step(s) before step {} had a non-finite loss or gradient; skipped\n", skipped, step + 1);
    if (leader && log_now) {
      const double step_ms = interval_ms / static_cast<double>(interval_steps);
      const double tokens_per_s = static_cast<double>(tokens_per_step) / (step_ms / 1000.0);
      const double grad_norm = r.grad_norm.item<double>();
      // Numbered as the progress line: the first step is 1.
      nlohmann::json record{{"step", step + 1},       {"loss", last_loss},       {"lr", r.lr},
                            {"grad_norm", grad_norm}, {"tokens_per_s", tokens_per_s}, {"step_ms", step_ms}};
      if (eval_now) record["val_loss"] = val_loss;
      metrics->write(record);
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      const double eta = elapsed / static_cast<double>(step + 1 - first_step) * static_cast<double>(tc.steps - step - 1);
      fmt::print("step {:>5}/{} | loss {:.4f}{} | lr {:.2e} | {:.0f} tok/s | {:.1f} ms | ETA {}\n", step + 1, tc.steps,
                 last_loss, eval_now ? fmt::format(" | val {:.4f}", val_loss) : std::string(), r.lr, tokens_per_s,
                 step_ms, format_duration(eta));
      std::fflush(stdout);
    }
    if (log_now) interval_steps = 0, interval_ms = 0;
    if (tc.sample_every > 0 && state.step % tc.sample_every == 0) print_sample(state, *sample_tokenizer);
    if (checkpointing && config.checkpoint.every > 0 && state.step % config.checkpoint.every == 0) checkpoint();
    if (int sig = agreed_stop_signal()) {
      if (leader) fmt::print("stopping after step {} on {}\n", state.step, strsignal(sig));
      if (checkpointing) checkpoint();
      summary["steps_run"] = state.step - first_step;
      if (leader) {
        write_summary(config, summary);
        plot_losses(config, state, *metrics);
      }
      std::fflush(stdout);
      return 128 + sig;
    }
  }
  check_health(state);  // the last steps' verdict, where it was not read yet
  if (checkpointing) checkpoint();  // the final state, unless just saved
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (leader) fmt::print("done: {} steps in {}, final loss {:.4f}\n", tc.steps - first_step, format_duration(total_s), last_loss);
  summary["steps_run"] = tc.steps - first_step;
  summary["final_loss"] = last_loss;
  if (graph_bytes >= 0) report_memory(state, graph_bytes, summary);
  if (const int64_t peak = peak_device_tensor_bytes(state.comm->device()); peak >= 0) {
    summary["peak_device_tensor_bytes"] = peak;  // this rank's (rank 0's in the file)
    if (leader) fmt::print("tensor memory on {}: peak {:.1f} MiB\n", state.comm->device().str(), static_cast<double>(peak) / (1 << 20));
  }
  if (state.grad_sync->num_buckets() > 0) {  // once per bucket and step, however many microbatches
    summary["gradient_all_reduces"] = state.grad_sync->total_reductions();
    summary["gradient_all_reduces_during_backward"] = state.grad_sync->total_started_during_backward();
  }
  if (const auto& p = state.model->fsdp_prefetcher(); p.total_uses() > 0) {
    summary["fsdp_weight_uses"] = p.total_uses();
    summary["fsdp_prefetched_uses"] = p.prefetched_uses();
    if (leader)
      fmt::print("FSDP all-gathers: {} of {} weight uses served by a gather started during the previous layer\n",
                 p.prefetched_uses(), p.total_uses());
  }
  if (leader) {
    write_summary(config, summary);
    plot_losses(config, state, *metrics);
  }
  state.comm->control().barrier();
  return 0;
}

}  // namespace spmd
