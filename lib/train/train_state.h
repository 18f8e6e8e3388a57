// Everything one rank trains with: communicator, sharded model, optimizer, data iterator. Built
// once per run by build_train_state; train_step advances it by one step.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ckpt/checkpoint_state.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "experts/step_routing.h"
#include "model/model.h"
#include "muon/muon.h"
#include "optim/adamw.h"
#include "parallel/grad_sync.h"
#include "parallel/sharded_model.h"
#include "parallel/stage_link.h"
#include "train/device_phases.h"

namespace spmd {

struct TrainState {
  Config config;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<ShardedModel> model;
  std::unique_ptr<StageLink> stage_link;    // this rank's pipeline stage (the only one without stages)
  std::unique_ptr<GradientSync> grad_sync;  // after model: its hooks go before the parameters
  CollectiveCounts last_step_collectives;   // those the last train_step started on this rank
  std::unique_ptr<Model> net;  // the family's forward (model.arch)
  std::unique_ptr<AdamW> optimizer;  // every parameter, or (train.optimizer muon) those Muon leaves
  std::unique_ptr<Muon> muon;        // train.optimizer muon: the blocks' matrices; null with adamw
  std::shared_ptr<const TokenDataset> val_data;  // null when eval is off or a blend has no data.val
  // A blend's per-source validation sets (data.sources[i].val), by name; empty when eval is off.
  std::vector<std::pair<std::string, std::shared_ptr<const TokenDataset>>> source_val_data;
  std::unique_ptr<DataLoader> loader;
  int64_t step = 0;  // the next step to run
  int64_t document_eot = -1;  // data.document_mask: the id that ends a document; -1: off
  // Fine-tuning data: the step's positions over its target tokens (global batch x block_size /
  // Batch::step_targets), which each microbatch's loss (a mean over its positions) is multiplied
  // by, so that the step's loss is the sum of the targets' losses over the step's targets on any
  // mesh. Exactly 1 (and never applied) when every position is a target.
  double target_loss_scale = 1.0;
  // Where reading a number costs a device sync (CUDA), steps judge their own health on the
  // device and these hold the verdict until a log step reads it; on the CPU numbers are read at
  // every step and they stay undefined.
  at::Tensor healthy;          // bool: no non-finite step so far (train.skip_nonfinite: false)
  at::Tensor first_bad_step;   // int64: the first non-finite step, or -1
  at::Tensor skipped_steps;    // int64: non-finite steps skipped (train.skip_nonfinite: true)
  DevicePhases phases;         // the last step's phase boundaries on the device's stream (CUDA)

  int rank() const { return comm->rank(); }
  // Numbers (loss, norm, health) are read on the host at every step: free on the CPU.
  // Whether the step reads its loss and norm on the host to decide the update (the CPU's fused
  // path), rather than deciding on the device (a GPU, or runtime.cpu_kernels: generic).
  bool reads_every_step() const;
  CheckpointState checkpoint_view() { return {config, *comm, *model, *optimizer, *loader, step, muon.get()}; }
  int64_t dp_size() const { return model->layout().dp_size(); }
  int64_t dp_index() const { return model->layout().dp_index(rank()); }
};

// Rendezvous (unless single_process), data, layout, sharded init, optimizer.
TrainState build_train_state(const Config& config, const RendezvousInfo& rendezvous, bool single_process);

struct StepTimings {
  double data_ms = 0, forward_ms = 0, backward_ms = 0, collective_ms = 0, optimizer_ms = 0, total_ms = 0;
  double pipeline_wait_ms = 0;  // blocked receiving from neighbouring stages (the bubble)
  // On CUDA, from events on the stream (train_step_synchronized only; empty elsewhere): the
  // device's time for data, the forward and backward passes, gradient sync and norm, optimizer.
  std::vector<double> device_phase_ms;
  // Each forward and backward pass in the stage's order: its wall time less its receive waits, and
  // its CPU time on this rank's thread (its compute alone, without another process's turn on a
  // shared core). bench_train replays a pipeline from them.
  std::vector<double> pass_busy_ms, pass_cpu_ms;
};

struct StepResult {
  at::Tensor loss;       // 0-dim float64 on the device: mean over the global batch
  at::Tensor grad_norm;  // 0-dim float64 on the device: before clipping
  double lr = 0;
  bool skipped = false;  // non-finite and train.skip_nonfinite (known here where reads_every_step)
  StepTimings timings;   // collective_ms and pipeline_wait_ms are included in forward/backward
  // Tensor bytes the autograd graphs hold between forward and backward (activations, and any
  // gathered FSDP weights): the most held at once by the microbatches in flight on this stage;
  // -1 unless the caching CPU allocator, which counts them, is installed.
  int64_t graph_bytes = -1;
  // Sparse layers (docs/experts.md): the step's load-balancing loss (unweighted; `loss` includes
  // it times aux_loss_coef) and each sparse layer's load over the global batch.
  double aux_loss = 0;
  double aux_loss_coef = 0;
  std::vector<StepRouting::Load> expert_loads;
  at::Tensor expert_counts;  // (n_layer, E) float64: the (token, slot) rows each expert got
};

// batch -> M x (forward, backward) over its microbatches -> grad sync -> clip -> AdamW (and Muon)
// (M = train.microbatches; the update equals the whole batch's). A non-finite loss or gradient
// norm is never applied: RuntimeError unless train.skip_nonfinite (at once where
// reads_every_step, else from check_health at the next read).
StepResult train_step(TrainState& state);

// train_step timed to a synchronized end: on CUDA train_step only queues the device's work, so
// its own total_ms is host time. This waits for the device and makes total_ms the whole step's
// wall time (on the CPU the same step, timed the same way), and reads the phases' device times
// (StepTimings::device_phase_ms, CUDA). Benchmarks time with it; training never waits.
StepResult train_step_synchronized(TrainState& state);

// Where numbers are read lazily: reads the device-side verdict of the steps since the last call
// (a sync). Throws RuntimeError naming the first non-finite step unless train.skip_nonfinite;
// returns how many steps were skipped since the last call.
int64_t check_health(TrainState& state);

// Mean validation loss over train.eval_batches fixed batches (the same rows on every mesh).
double evaluate(TrainState& state);
double evaluate(TrainState& state, const TokenDataset& val);  // the same on another validation set
// Whether the run has validation data to evaluate at all (data.val or a source's val).
bool has_eval_data(const TrainState& state);

}  // namespace spmd
