// Building a rank's training state, and one training step.
#include "train/expert_routing.h"
#include "train/train_state.h"

#include <chrono>
#include <cmath>

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include "comm/backend.h"
#include "kernels/cpu/blas_library.h"
#include "kernels/kernels.h"
#include "optim/lr_schedule.h"
#include "parallel/grad_sync.h"
#include "parallel/layout.h"
#include "train/documents.h"
#include "train/step_passes.h"
#include "train/training_data.h"
#include "util/elapsed.h"
#include "util/error.h"
#include "util/test_hooks.h"

namespace spmd {

namespace {
using Clock = std::chrono::steady_clock;

// (rows, seq) int64 tensor on `device` over a batch's token vector (copied: the batch goes away).
at::Tensor to_tensor(const std::vector<int64_t>& tokens, int64_t rows, int64_t seq, c10::Device device) {
  const at::Tensor host = at::from_blob(const_cast<int64_t*>(tokens.data()), {rows, seq}, at::kLong);
  if (device.is_cpu()) return host.clone();
  // A copy from pageable memory would wait for everything queued on the GPU; from pinned memory
  // it is queued too, and the host runs on (the caching host allocator keeps the buffer until
  // the copy is done).
  at::Tensor pinned = at::empty({rows, seq}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  pinned.copy_(host);
  return pinned.to(device, /*non_blocking=*/true);
}

// Mean over the data- and context-parallel ranks of each rank's mean loss (each over as many
// tokens): the global batch's mean, as a 0-dim float64 tensor on the device (not read here).
at::Tensor global_mean(const at::Tensor& local_mean, const ShardedModel& model) {
  at::Tensor value = local_mean.detach().to(at::kDouble).reshape({1}).clone();
  model.comm().along(model.layout().token_axes()).all_reduce_sum(value);
  return (value / static_cast<double>(model.layout().token_split())).reshape({});
}

// The clipping factor for a global gradient norm (1 when not clipping), on the norm's device.
at::Tensor clip_factor(const at::Tensor& grad_norm, double grad_clip) {
  if (grad_clip <= 0) return at::ones_like(grad_norm);
  return at::where(grad_norm > grad_clip, grad_clip / (grad_norm + 1e-6), at::ones_like(grad_norm));
}

// The update where numbers are read at every step: judged on the host.
void apply_update_read_now(TrainState& s, StepResult& result) {
  const auto& tc = s.config.train;
  const double loss = result.loss.item<double>(), grad_norm = result.grad_norm.item<double>();
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
    if (!tc.skip_nonfinite)
      throw RuntimeError(fmt::format("step {}: non-finite {} ({}); stopping. Set train.skip_nonfinite: true to skip "
                                     "such steps instead",
                                     s.step, std::isfinite(loss) ? "gradient norm" : "loss",
                                     std::isfinite(loss) ? grad_norm : loss));
    result.skipped = true;
    return;
  }
  const bool clip = tc.grad_clip > 0 && grad_norm > tc.grad_clip;
  const double scale = clip ? tc.grad_clip / (grad_norm + 1e-6) : 1.0;
  s.optimizer->step(result.lr, scale);
  if (s.muon) s.muon->step(muon_learning_rate(tc, result.lr), scale);
}

// The update where reading a number would sync the device: judged on the device. A non-finite
// step is not applied; without skip_nonfinite nothing after it is applied either, and
// check_health reports it at the next read.
void apply_update_on_device(TrainState& s, StepResult& result) {
  const auto& tc = s.config.train;
  const at::Tensor finite = at::isfinite(result.loss) & at::isfinite(result.grad_norm);
  if (!s.healthy.defined()) {
    s.healthy = at::ones({}, finite.options());
    s.first_bad_step = at::full({}, -1, finite.options().dtype(at::kLong));
    s.skipped_steps = at::zeros({}, finite.options().dtype(at::kLong));
  }
  const at::Tensor newly_bad = s.healthy & ~finite;
  s.first_bad_step = at::where(newly_bad, at::full_like(s.first_bad_step, s.step), s.first_bad_step);
  s.skipped_steps.add_((~finite).to(at::kLong));
  const at::Tensor apply = tc.skip_nonfinite ? finite : (finite & s.healthy);
  if (!tc.skip_nonfinite) s.healthy = s.healthy & finite;
  const at::Tensor scale = clip_factor(result.grad_norm, tc.grad_clip);
  s.optimizer->step_on_device(result.lr, scale, apply);
  if (s.muon) s.muon->step_on_device(muon_learning_rate(tc, result.lr), scale, apply);
}
}  // namespace

bool TrainState::reads_every_step() const { return !kernels::takes_generic_path(comm->device()); }

TrainState build_train_state(const Config& config, const RendezvousInfo& rendezvous, bool single_process) {
  TrainState s;
  s.config = config;
  ModelLayout layout = plan_layout(config);
  // Data before the rendezvous: a bad file is a usage error (exit 2) before any peer connects, so
  // no rank's connection error can be the first failure the launcher sees.
  std::vector<BlendSource> training_sources = open_training_sources(config);
  if (config.train.eval_every > 0 && (config.data.sources.empty() || !config.data.val.empty()))
    s.val_data = TokenDataset::open(config.data.val, config.model.vocab_size);
  if (config.train.eval_every > 0) s.source_val_data = open_source_val_data(config);
  s.document_eot = document_eot_token(config);
  const ResolvedRuntime runtime = resolve_runtime(config.runtime);
  kernels::use_cpu_kernels(config.runtime.cpu_kernels);
  s.comm = single_process ? std::make_unique<Communicator>(layout.mesh, runtime)
                          : std::make_unique<Communicator>(rendezvous, layout.mesh, runtime);
  // Every rank picks its BLAS now (a timed choice), not inside the first step's parallel region.
  const std::string blas = kernels::cpu::blas_description();
  const std::string matmuls = kernels::matmul_dtype_note(config.model.matmul_dtype, s.comm->device());
  if (s.comm->rank() == 0)  // after the ranks compared GPUs
    fmt::print("{}; BLAS {}; {}\n", s.comm->runtime().reason, blas, matmuls);
  const int64_t dp_size = layout.dp_size(), dp_index = layout.dp_index(s.comm->rank());
  s.loader = std::make_unique<DataLoader>(std::move(training_sources), config.data.batch_size, config.model.block_size,
                                          config.train.seed, dp_index, dp_size, /*prefetch=*/2,
                                          config.data.window_stride);
  s.model = std::make_unique<ShardedModel>(std::move(layout), *s.comm, static_cast<uint64_t>(config.train.seed));
  s.model->fsdp_prefetcher().set_enabled(config.runtime.fsdp_prefetch);
  s.stage_link = std::make_unique<StageLink>(s.model->layout(), *s.comm);
  s.grad_sync = std::make_unique<GradientSync>(
      *s.model, static_cast<int64_t>(config.runtime.grad_bucket_mb * 1024 * 1024));
  s.net = make_model(config.model);
  std::vector<bool> decay;
  std::vector<at::Tensor> adamw_params = s.model->params();
  for (size_t i = 0; i < adamw_params.size(); ++i) {
    const ParamInfo& info = s.model->layout().params[i].info;
    decay.push_back(info.weight_decay);
    if (takes_muon(config.train, info)) adamw_params[i] = at::Tensor();  // Muon's: no AdamW state
    if (!info.trained) adamw_params[i] = at::Tensor();                  // set by a rule after each step
  }
  s.optimizer = std::make_unique<AdamW>(adamw_params, decay, config.train);
  if (config.train.optimizer == Optimizer::kMuon) s.muon = std::make_unique<Muon>(*s.model, config.train.muon);
  return s;
}

namespace {
// See TrainState::target_loss_scale. A step without any target has no loss to scale (it is 0).
double target_loss_scale_of(const Batch& batch, int64_t global_batch) {
  if (batch.step_targets <= 0) return 1.0;
  if (test_hooks().loss_per_rank_mean) {  // the wrong averaging, for the tests that must catch it
    int64_t local = 0;
    for (int64_t t : batch.targets) local += t >= 0;
    return local > 0 ? static_cast<double>(batch.rows * batch.seq) / static_cast<double>(local) : 1.0;
  }
  return static_cast<double>(global_batch * batch.seq) / static_cast<double>(batch.step_targets);
}
}  // namespace

StepResult train_step(TrainState& s) {
  const auto& tc = s.config.train;
  ShardedModel& model = *s.model;
  const c10::Device device = s.comm->device();
  StepResult result;
  const auto start = Clock::now();
  const int64_t collective_start = collective_time_ns();
  const CollectiveCounts counts_start = collective_counts();
  const double wait_start = s.stage_link->receive_wait_ms();
  s.phases.begin(device);

  Batch batch = s.loader->next();
  s.target_loss_scale = target_loss_scale_of(batch, s.config.data.batch_size);
  at::Tensor inputs = to_tensor(batch.inputs, batch.rows, batch.seq, device);  // (rows, T)
  at::Tensor targets = to_tensor(batch.targets, batch.rows, batch.seq, device);
  result.timings.data_ms = ms_since(start);
  s.phases.mark();

  // The microbatches' forward and backward passes on this rank's stage (plain gradient
  // accumulation without stages); only the last backward communicates (grad_sync).
  const at::Tensor loss_sum = run_step_passes(s, inputs, targets, result);
  const double microbatches = static_cast<double>(tc.microbatches);
  s.phases.mark();

  auto phase = Clock::now();
  s.grad_sync->finish();
  model.fsdp_prefetcher().drain();  // nothing may still read the shards AdamW is about to update
  result.grad_norm = global_grad_norm(model);
  result.loss = global_mean(loss_sum / microbatches, model);
  if (result.aux_loss_coef > 0) result.loss = result.loss + result.aux_loss_coef * result.aux_loss;
  result.timings.backward_ms += ms_since(phase);
  s.phases.mark();

  phase = Clock::now();
  result.lr = learning_rate_at(tc, s.step);
  if (s.reads_every_step()) apply_update_read_now(s, result);
  else apply_update_on_device(s, result);
  move_expert_biases(s, result.expert_counts);
  result.timings.optimizer_ms = ms_since(phase);
  s.phases.mark();
  result.timings.collective_ms = static_cast<double>(collective_time_ns() - collective_start) / 1e6;
  const CollectiveCounts counts = collective_counts();
  s.last_step_collectives = {counts.all_reduces - counts_start.all_reduces,     counts.all_gathers - counts_start.all_gathers,
                             counts.reduce_scatters - counts_start.reduce_scatters, counts.broadcasts - counts_start.broadcasts,
                             counts.sends - counts_start.sends,                 counts.receives - counts_start.receives,
                             counts.all_to_alls - counts_start.all_to_alls};
  result.timings.pipeline_wait_ms = s.stage_link->receive_wait_ms() - wait_start;
  result.timings.total_ms = ms_since(start);
  ++s.step;
  return result;
}

StepResult train_step_synchronized(TrainState& s) {
  const auto start = Clock::now();
  StepResult result = train_step(s);
  synchronize(s.comm->device());  // the device's queued work is part of the step
  result.timings.total_ms = ms_since(start);
  result.timings.device_phase_ms = s.phases.elapsed_ms();  // the device has passed every mark
  return result;
}

int64_t check_health(TrainState& s) {
  if (!s.healthy.defined()) return 0;
  const int64_t first_bad = s.first_bad_step.item<int64_t>();
  if (!s.config.train.skip_nonfinite && first_bad >= 0)
    throw RuntimeError(fmt::format("step {}: non-finite loss or gradient norm; no update was applied from it on; "
                                   "stopping. Set train.skip_nonfinite: true to skip such steps instead",
                                   first_bad));
  const int64_t skipped = s.skipped_steps.item<int64_t>();
  s.skipped_steps.zero_();
  return skipped;
}

bool has_eval_data(const TrainState& s) { return s.val_data != nullptr || !s.source_val_data.empty(); }

double evaluate(TrainState& s) {
  SPMD_ASSERT(s.val_data != nullptr, "evaluate() without validation data");
  return evaluate(s, *s.val_data);
}

double evaluate(TrainState& s, const TokenDataset& val) {
  const auto& c = s.config;
  at::NoGradGuard no_grad;
  double sum = 0;
  int64_t targets = 0;  // fine-tuning data: the targets of all the batches, whose losses `sum` adds up
  for (int64_t k = 0; k < c.train.eval_batches; ++k) {
    Batch batch = eval_batch(val, k, c.data.batch_size, c.model.block_size, s.dp_index(), s.dp_size());
    const c10::Device device = s.comm->device();
    at::Tensor loss = evaluate_passes(s, to_tensor(batch.inputs, batch.rows, batch.seq, device),
                                      to_tensor(batch.targets, batch.rows, batch.seq, device));
    const double mean = global_mean(loss, *s.model).item<double>();  // evaluation is a number the user asked for
    if (batch.step_targets < 0) {
      sum += mean;
    } else {  // the mean over every position of the batch, back to the sum over its targets
      sum += mean * static_cast<double>(c.data.batch_size * batch.seq);
      targets += batch.step_targets;
    }
  }
  if (val.has_targets()) return targets > 0 ? sum / static_cast<double>(targets) : 0.0;
  return sum / static_cast<double>(c.train.eval_batches);
}

}  // namespace spmd
