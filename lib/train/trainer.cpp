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

#include "ckpt/checkpoint_restore.h"
#include "hf/hf_import.h"
#include "hf/name_map.h"
#include "comm/backend.h"
#include "data/dataset_tokenizer.h"
#include "generate/generate.h"
#include "generate/sample_run.h"
#include "parallel/pipeline_schedule.h"
#include "monitor/loss_plot.h"
#include "monitor/metrics.h"
#include "kernels/cpu/blas_library.h"
#include "train/loop_checkpoints.h"
#include "train/stop_signal.h"
#include "train/task_scores.h"
#include "train/train_state.h"
#include "util/caching_cpu_allocator.h"
#include "util/durable_file.h"
#include "util/elapsed.h"
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
  std::vector<double> peak_per_stage(static_cast<size_t>(layout.pipeline.stages()), 0.0);
  std::vector<double> graph_per_stage = peak_per_stage;
  for (int64_t r = 0; r < all.size(0); ++r) {
    const auto stage = static_cast<size_t>(layout.stage_of(r));
    peak_per_stage[stage] = std::max(peak_per_stage[stage], all[r][0].item<double>());
    graph_per_stage[stage] = std::max(graph_per_stage[stage], all[r][1].item<double>());
  }
  summary["peak_tensor_bytes_per_stage"] = peak_per_stage;
  summary["graph_bytes_per_stage"] = graph_per_stage;
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
             fmt::join(blocks, ", "), name_of(config.runtime.pipeline_schedule), config.train.microbatches,
             100 * bubble_fraction(shape));
}

// Facts about the run for programs (tests, scripts): output.dir/summary.json, written by rank 0
// at the end of a run or a stop. The progress lines are for people.
void write_summary(const Config& config, const nlohmann::json& summary) {
  write_file_durably(config.output.dir + "/summary.json", summary.dump(1) + "\n");
}

// train.sample_every: the tokenizer beside data.train (UsageError at the start when there is none).
DatasetMeta training_tokenizer(const Config& config) {
  const std::string meta = dataset_meta_path(tokenizer_data_path(config.data));
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
  std::vector<int64_t> tokens = generate(*state.model, *state.net, prompt, options, nullptr);
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

namespace {
// Where the parameters come from: --resume's checkpoint, else train.init_from, else the seed.
// Returns whether the run resumed.
bool restore_or_initialize(TrainState& state, const Config& config, const TrainOptions& options) {
  const bool leader = state.rank() == 0;
  // "" when not resuming, or --resume auto found no checkpoint yet.
  const std::string resume_path = options.resume ? resolve_resume_path(config, options.resume_path) : "";
  const bool resuming = !resume_path.empty();
  if (options.resume && !resuming && leader)
    fmt::print("--resume auto: no checkpoint in {} yet, starting from step 0\n", config.checkpoint.dir);
  if (!resuming && !config.train.init_from.empty()) {  // when resuming, the checkpoint wins
    load_hf_checkpoint(*state.model, config.train.init_from);
    if (leader)
      fmt::print("initialized from Hugging Face {} checkpoint {}\n", hf_map(config.model).family, config.train.init_from);
  }
  if (!test_hooks().dump_init_dir.empty()) dump_parameters(*state.model, test_hooks().dump_init_dir);
  if (resuming) {
    CheckpointState checkpointed = state.checkpoint_view();
    restore_checkpoint(checkpointed, resume_path);
    if (leader) fmt::print("resumed from {} at step {}\n", resume_path, state.step);
    if (leader && !state.loader->reweight_note().empty()) fmt::print("{}\n", state.loader->reweight_note());
  }
  return resuming;
}

// What runs where: the line a person reads first, and the same facts for summary.json.
nlohmann::json describe_run(const TrainState& state, const Config& config) {
  const int64_t state_bytes = state.model->local_param_bytes() * 2 + state.optimizer->state_bytes() +
                              (state.muon ? state.muon->state_bytes() : 0);
  const auto& mesh = state.model->layout().mesh;
  nlohmann::json summary{{"device", state.comm->device().str()},  {"backend", state.comm->runtime().backend},
                         {"tf32", state.comm->runtime().tf32},
                         {"ranks", mesh.size()},                  {"data_parallel", state.dp_size()},
                         {"context_parallel", state.model->layout().cp_size()},
                         {"params", num_params(config.model)}, {"state_bytes_per_rank", state_bytes},
                         {"optimizer", name_of(config.train.optimizer)},
                         {"gradient_buckets", state.grad_sync->num_buckets()},
                         {"blas", kernels::cpu::blas_description()},
                         {"pipeline_stages", state.model->layout().pipeline.stages()},
                         {"pipeline_chunks", state.model->layout().pipeline.chunks},
                         {"pipeline_schedule", name_of(config.runtime.pipeline_schedule)}};
  if (state.document_eot >= 0) summary["document_eot_token"] = state.document_eot;  // data.document_mask
  if (state.muon) summary["muon_newton_schulz_flops"] = state.muon->owned_flops();  // this rank's, per step
  if (state.rank() != 0) return summary;
  if (state.document_eot >= 0)
    fmt::print("packed documents: token {} ends a document; attention stays inside documents, positions restart\n",
               state.document_eot);
  fmt::print("spmd-train: mesh {} | {} ranks on {} over {} | data-parallel {} | {} params | params+grads+AdamW "
             "per rank {:.1f} MiB | {} gradient bucket(s)\n",
             mesh.describe(), mesh.size(), state.comm->device().str(), state.comm->runtime().backend, state.dp_size(),
             num_params(config.model), static_cast<double>(state_bytes) / (1 << 20),
             state.grad_sync->num_buckets());
  print_pipeline(config, state.model->layout().pipeline);
  return summary;
}

// The progress of the loop: step times since the last log line, then the metrics.jsonl record
// (for programs) and the progress line (for people), both numbering steps from 1.
class Progress {
 public:
  Progress(const Config& config, int64_t first_step, MetricsLog* metrics)
      : config_(config), first_step_(first_step), metrics_(metrics), start_(std::chrono::steady_clock::now()) {}

  // On CUDA a step's host time is only its launch time, but reading the numbers at the log step
  // waits for all of them, so the sum over the interval is the interval's wall time.
  void add_step(std::chrono::steady_clock::time_point step_start) {
    ++interval_steps_;
    interval_ms_ += ms_since(step_start);
  }

  // Every rank resets its interval; the leader (the one with the metrics log) writes and prints.
  // `source_val_losses`: a blend's val_loss/<source>; `scores`: eval.tasks' results at this step
  // ({} when none was due).
  void log(int64_t step, double loss, const StepResult& r, std::optional<double> val_loss,
           const std::vector<std::pair<std::string, double>>& source_val_losses, const nlohmann::json& scores) {
    const double step_ms = interval_ms_ / static_cast<double>(interval_steps_);
    interval_steps_ = 0, interval_ms_ = 0;
    if (!metrics_) return;
    const auto& tc = config_.train;
    const double tokens_per_s =
        static_cast<double>(config_.data.batch_size * config_.model.block_size) / (step_ms / 1000.0);
    nlohmann::json record{{"step", step + 1},  {"loss", loss},   {"lr", r.lr}, {"grad_norm", r.grad_norm.item<double>()},
                          {"tokens_per_s", tokens_per_s}, {"step_ms", step_ms}};
    if (val_loss) record["val_loss"] = *val_loss;
    for (const auto& [name, value] : source_val_losses) record["val_loss/" + name] = value;
    const std::string experts = add_expert_loads(r, record);
    record.update(scores);
    metrics_->write(record);
    const double eta = seconds() / static_cast<double>(step + 1 - first_step_) * static_cast<double>(tc.steps - step - 1);
    std::string vals = val_loss ? fmt::format(" | val {:.4f}", *val_loss) : std::string();
    for (const auto& [name, value] : source_val_losses) vals += fmt::format(" | val/{} {:.4f}", name, value);
    fmt::print("step {:>5}/{} | loss {:.4f}{}{}{} | lr {:.2e} | {:.0f} tok/s | {:.1f} ms | ETA {}\n", step + 1,
               tc.steps, loss, experts, vals, describe_scores(scores), r.lr, tokens_per_s, step_ms, format_duration(eta));
    std::fflush(stdout);
  }

  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  // Sparse layers (docs/experts.md): the balancing loss and each layer's load over the global
  // batch (tokens per expert: min, max, max over mean) into the record; " | aux 1.0123 | load
  // 1.42" (the most loaded layer's max over mean) for the progress line.
  static std::string add_expert_loads(const StepResult& r, nlohmann::json& record) {
    if (r.expert_loads.empty()) return "";
    record["aux_loss"] = r.aux_loss;
    double worst = 0;
    for (const auto& load : r.expert_loads) {
      const std::string prefix = fmt::format("experts/layer{}/", load.layer);
      record[prefix + "load_min"] = load.min;
      record[prefix + "load_max"] = load.max;
      record[prefix + "load_max_over_mean"] = load.max_over_mean;
      if (load.device_max_over_mean > 0) record[prefix + "device_load_max_over_mean"] = load.device_max_over_mean;
      worst = std::max(worst, load.max_over_mean);
    }
    return fmt::format(" | aux {:.4f} | load {:.2f}", r.aux_loss, worst);
  }

  // " | hellaswag acc 0.2500 acc_norm 0.3000" per task scored at this step.
  std::string describe_scores(const nlohmann::json& scores) const {
    std::string text;
    for (const auto& task : config_.eval.tasks) {
      const std::string prefix = "eval/" + task.name + "/";
      if (scores.contains(prefix + "acc"))
        text += fmt::format(" | {} acc {:.4f} acc_norm {:.4f}", task.name, scores[prefix + "acc"].get<double>(),
                            scores[prefix + "acc_norm"].get<double>());
    }
    return text;
  }

  const Config& config_;
  int64_t first_step_;
  MetricsLog* metrics_;
  std::chrono::steady_clock::time_point start_;
  int64_t interval_steps_ = 0;
  double interval_ms_ = 0;
};

// The end of a finished run's summary: tensor memory, gradient buckets, FSDP prefetch.
void add_run_totals(TrainState& state, int64_t graph_bytes, nlohmann::json& summary) {
  const bool leader = state.rank() == 0;
  if (graph_bytes >= 0) report_memory(state, graph_bytes, summary);
  if (const int64_t peak = peak_device_tensor_bytes(state.comm->device()); peak >= 0) {
    summary["peak_device_tensor_bytes"] = peak;  // this rank's (rank 0's in the file)
    if (leader) fmt::print("tensor memory on {}: peak {:.1f} MiB\n", state.comm->device().str(), static_cast<double>(peak) / (1 << 20));
  }
  if (!state.model->layout().context_axes.empty()) {  // which exchange the attention used, and how often
    summary["context_exchange"] = name_of(state.model->layout().context_exchange);
    summary["ring_attention_forwards"] = state.model->ring_attention_forwards();
  }
  if (state.grad_sync->num_buckets() > 0) {  // once per bucket and step, however many microbatches
    summary["gradient_all_reduces"] = state.grad_sync->total_reductions();
    summary["gradient_all_reduces_during_backward"] = state.grad_sync->total_started_during_backward();
    // .grad is the bucket: one gradient-sized buffer (0 gradients outside it), rank 0's.
    summary["gradient_bucket_bytes"] = state.grad_sync->bucket_bytes();
    summary["gradients_outside_buckets"] = state.grad_sync->grads_outside_buckets();
  }
  if (const auto& p = state.model->fsdp_prefetcher(); p.total_uses() > 0) {
    summary["fsdp_weight_uses"] = p.total_uses();
    summary["fsdp_unit_gathers"] = p.unit_gathers();
    summary["fsdp_prefetched_gathers"] = p.prefetched_gathers();
    if (leader)
      fmt::print("FSDP all-gathers: {} (one per block or the embeddings and head, for {} weight uses), {} of them "
                 "started during the previous block\n",
                 p.unit_gathers(), p.total_uses(), p.prefetched_gathers());
  }
  // The collectives of the last training step on this rank (rank 0's in the file), by kind.
  const CollectiveCounts& c = state.last_step_collectives;
  summary["collectives_last_step"] = {{"all_reduce", c.all_reduces}, {"all_gather", c.all_gathers},
                                      {"reduce_scatter", c.reduce_scatters}, {"broadcast", c.broadcasts},
                                      {"send", c.sends}, {"receive", c.receives}, {"all_to_all", c.all_to_alls}};
}

// After the last save finished: the summary and the loss plot written, the run's last act.
void close_run(const Config& config, TrainState& state, const LoopCheckpoints& checkpoints, MetricsLog* metrics,
               nlohmann::json& summary) {
  checkpoints.add_to_summary(summary);
  if (state.rank() == 0) {
    write_summary(config, summary);
    plot_losses(config, state, *metrics);
  }
}

// Every rank must agree on stopping (a signal or a failed background save may reach them at
// different steps): the max of their votes is all-reduced after each step, over the CPU control
// group (no GPU wait). Returns {signal, a save failed}.
std::pair<int, bool> agreed_stop_votes(TrainState& state, LoopCheckpoints& checkpoints) {
  at::Tensor votes = at::tensor({static_cast<float>(stop_signal_received()),
                                 checkpoints.failed_since_last_check() ? 1.0f : 0.0f});
  state.comm->control().all_reduce_max(votes);
  return {static_cast<int>(votes[0].item<float>()), votes[1].item<float>() > 0};
}

// The run's end after its last step: the last verdict read, the final state saved, the summary.
void finish_run(const Config& config, TrainState& state, LoopCheckpoints& checkpoints, MetricsLog* metrics,
                const Progress& progress, int64_t first_step, double last_loss, int64_t graph_bytes,
                nlohmann::json& summary) {
  check_health(state);  // the last steps' verdict, where it was not read yet
  const double steps_s = progress.seconds();
  checkpoints.save();   // the final state, unless just saved
  checkpoints.finish();
  const double total_s = progress.seconds();
  summary["loop_s"] = total_s;
  summary["steps_s"] = steps_s;                  // the steps alone, saves in the background included
  summary["final_save_s"] = total_s - steps_s;  // the end's save, or the wait for the one in flight
  if (state.rank() == 0)
    fmt::print("done: {} steps in {}, final loss {:.4f}\n", config.train.steps - first_step, format_duration(total_s),
               last_loss);
  summary["steps_run"] = config.train.steps - first_step;
  summary["final_loss"] = last_loss;
  add_run_totals(state, graph_bytes, summary);
  close_run(config, state, checkpoints, metrics, summary);
  state.comm->control().barrier();
}
}  // namespace

int run_training(const Config& config, const RendezvousInfo& rendezvous, const TrainOptions& options) {
  const auto& tc = config.train;
  TrainState state = build_train_state(config, rendezvous, options.single_process);
  const bool leader = state.rank() == 0;
  const bool resuming = restore_or_initialize(state, config, options);
  std::unique_ptr<MetricsLog> metrics =
      leader ? std::make_unique<MetricsLog>(config.output.dir, resuming ? state.step : -1) : nullptr;
  LoopCheckpoints checkpoints(state, resuming ? state.step : -1);  // collective
  nlohmann::json summary = describe_run(state, config);

  const TaskScores task_scores(config);
  std::optional<DatasetMeta> sample_tokenizer;
  if (tc.sample_every > 0) sample_tokenizer = training_tokenizer(config);
  const int64_t first_step = state.step;
  Progress progress(config, first_step, metrics.get());
  double last_loss = NAN;
  int64_t graph_bytes = -1;
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
    const bool eval_now = has_eval_data(state) && ((step + 1) % tc.eval_every == 0 || step + 1 == tc.steps);
    const bool score_now = task_scores.due(step + 1, tc.steps);
    const bool log_now = eval_now || score_now || step % tc.log_every == 0 || step + 1 == tc.steps;
    if (log_now || state.reads_every_step()) last_loss = r.loss.item<double>();  // a sync on CUDA: log steps only
    const int64_t skipped = log_now ? check_health(state) : 0;
    progress.add_step(step_start);
    const std::optional<double> val_loss = eval_now && state.val_data ? std::optional<double>(evaluate(state)) : std::nullopt;
    std::vector<std::pair<std::string, double>> source_val_losses;
    if (eval_now)
      for (const auto& [name, val] : state.source_val_data) source_val_losses.emplace_back(name, evaluate(state, *val));
    if (leader && skipped > 0) fmt::print("{} step(s) before step {} had a non-finite loss or gradient; skipped\n", skipped, step + 1);
    const nlohmann::json scores = score_now ? task_scores.score(state, step + 1) : nlohmann::json::object();
    if (log_now) progress.log(step, last_loss, r, val_loss, source_val_losses, scores);
    if (tc.sample_every > 0 && state.step % tc.sample_every == 0) print_sample(state, *sample_tokenizer);
    if (config.checkpoint.every > 0 && state.step % config.checkpoint.every == 0) checkpoints.save();
    const auto [sig, save_failed] = agreed_stop_votes(state, checkpoints);
    if (save_failed) checkpoints.raise_failure();
    if (sig) {
      if (leader) fmt::print("stopping after step {} on {}\n", state.step, strsignal(sig));
      checkpoints.save();
      checkpoints.finish();
      summary["steps_run"] = state.step - first_step;
      close_run(config, state, checkpoints, metrics.get(), summary);
      std::fflush(stdout);
      return 128 + sig;
    }
  }
  finish_run(config, state, checkpoints, metrics.get(), progress, first_step, last_loss, graph_bytes, summary);
  return 0;
}

}  // namespace spmd
