// Everything one rank trains with: communicator, sharded model, optimizer, data iterator. Built
// once per run by build_train_state; train_step advances it by one step.
#pragma once
#include <cstdint>
#include <memory>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "model/gpt2.h"
#include "optim/adamw.h"
#include "parallel/grad_sync.h"
#include "parallel/sharded_model.h"

namespace spmd {

struct TrainState {
  Config config;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<ShardedModel> model;
  std::unique_ptr<GradientSync> grad_sync;  // after model: its hooks go before the parameters
  std::unique_ptr<Gpt2> gpt;
  std::unique_ptr<AdamW> optimizer;
  std::shared_ptr<const TokenDataset> train_data, val_data;  // val_data null when eval is off
  std::unique_ptr<DataLoader> loader;
  int64_t step = 0;  // the next step to run

  int rank() const { return comm->rank(); }
  int64_t dp_size() const { return model->layout().dp_size(); }
  int64_t dp_index() const { return model->layout().dp_index(rank()); }
};

// Rendezvous (unless single_process), data, layout, sharded init, optimizer.
TrainState build_train_state(const Config& config, const RendezvousInfo& rendezvous, bool single_process);

struct StepTimings {
  double data_ms = 0, forward_ms = 0, backward_ms = 0, collective_ms = 0, optimizer_ms = 0, total_ms = 0;
};

struct StepResult {
  double loss = 0;       // mean over the global batch
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool skipped = false;  // non-finite and train.skip_nonfinite
  StepTimings timings;   // collective_ms is included in forward/backward
  // Tensor bytes the autograd graph holds between forward and backward (activations, and any
  // gathered FSDP weights); -1 unless the caching CPU allocator, which counts them, is installed.
  int64_t graph_bytes = -1;
};

// batch -> forward -> backward -> grad sync -> clip -> AdamW. Throws RuntimeError on a
// non-finite loss or gradient unless train.skip_nonfinite. `inject_nan` poisons the loss (tests).
StepResult train_step(TrainState& state, bool inject_nan = false);

// Mean validation loss over train.eval_batches fixed batches (the same rows on every mesh).
double evaluate(TrainState& state);

}  // namespace spmd
