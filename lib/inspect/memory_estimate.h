// Per-device memory estimate of a training run, before launching anything.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/layout.h"

namespace spmd {

// One microbatch's activations held between its forward and its backward on one device, by where
// they are kept (bytes). What each op keeps is the runtime's (memory_estimate.cpp lists it).
struct ActivationParts {
  int64_t stage_input = 0;  // the residual stream entering the stage's first block (the embeddings' output
                            // or the received activation), and on the first stage the embeddings' own keep
  int64_t per_block = 0;    // one block: its output and, without runtime.remat full, its internals
  int64_t blocks = 0;       // per_block x the stage's blocks
  int64_t head = 0;         // ln_f's statistics, the loss's gradients of its input and table (last stage only)
  int64_t total() const { return stage_input + blocks + head; }
};

struct MemoryEstimate {
  int64_t params = 0;        // this device's parameter shards (of its pipeline stage's parameters)
  int64_t grads = 0;         // gradients: same sharding as the parameters
  // Optimizer state, same sharding as the parameters: AdamW's m and v for each parameter; with
  // train.optimizer muon one momentum buffer per Muon matrix (muon/muon_matrices.h) instead.
  int64_t optimizer = 0;
  int64_t muon_momentum = 0; // of `optimizer`: the Muon matrices' momentum (0 under AdamW)
  int64_t fsdp_gathered = 0; // FSDP working set: 4x the largest unit gathered (fsdp_prefetch.h)
  // Activation gradients sent back to the previous stage: a send keeps its buffer until the step's
  // end waits for it (Gloo's send has no completion to poll), so at a stage's last backward one
  // stream per earlier (microbatch, chunk) is still held. 0 on the first stage and without stages.
  int64_t gradient_sends = 0;
  // A backward's own working set beyond what it has freed: the gradients entering and leaving its
  // widest op (attention's probabilities, or the CPU fused kernel's dY and dQKV, or the MLP's hidden
  // layer); on the last stage the loss's chunk of logits where wider (the forward's end holds every
  // activation, too).
  int64_t backward_working_set = 0;
  // runtime.remat full or selective: what the block being backwarded recomputes, held through its
  // backward (its internals that runtime.remat none would have kept).
  int64_t recompute = 0;
  int64_t activations = 0;   // saved for backward: activations_per_microbatch x microbatches_in_flight
  int64_t activations_per_microbatch = 0;  // one microbatch through this device's blocks (one chunk's when interleaved)
  int64_t microbatches_in_flight = 1;      // forwarded, not yet backwarded, at the worst moment
  ActivationParts activation_parts;        // activations_per_microbatch by where it is kept
  Remat remat = Remat::kNone;              // runtime.remat the activations assume
  std::vector<std::string> sequence_parallel_axes;  // the residual stream's sequence split (empty: none)
  int64_t sequence_parallel_degree = 1;             // positions of the stream held: T / this
  std::vector<std::string> context_parallel_axes;   // every activation's head-tail split (empty: none)
  int64_t context_parallel_degree = 1;              // positions of every activation held: T / this
  ContextExchange context_exchange = ContextExchange::kAllGather;  // how attention gets keys and values
  int64_t total() const {
    return params + grads + optimizer + fsdp_gathered + gradient_sends + backward_working_set +
           recompute + activations;
  }
};

// The most microbatches whose activations `stage` holds at once: max_in_flight of its passes
// under `schedule` (1f1b: min(stages - stage, M); gpipe: M; interleaved: (microbatch, chunk)
// pairs, each holding one chunk's blocks). Without stages, 1 (plain gradient accumulation runs
// each microbatch's backward right after its forward).
int64_t microbatches_in_flight(const PipelineLayout& pipeline, PipelineSchedule schedule, int64_t microbatches,
                               int64_t stage);

// Bytes on the device `rank`: fp32 parameters, gradients and optimizer state (under `optimizer`)
// of its pipeline stage (all without stages), and the activations its blocks keep for backward for global_batch /
// data-parallel degree / microbatches rows under `remat`, times the microbatches in flight on its
// stage under `schedule`. Sequence parallelism comes from the layout.
MemoryEstimate estimate_memory(const ModelLayout& layout, int64_t global_batch, int64_t microbatches = 1,
                               int64_t rank = 0, PipelineSchedule schedule = PipelineSchedule::kOneFOneB,
                               Remat remat = Remat::kNone, Optimizer optimizer = Optimizer::kAdamW);

// The activation bytes one microbatch keeps through all of `rank`'s blocks under `remat`: for an
// interleaved stage the sum over its chunks, each with its own input stream (estimate_memory's
// activations_per_microbatch is the largest chunk's, what one (microbatch, chunk) in flight holds);
// otherwise activations_per_microbatch. What the cost model's elementwise traffic passes over.
int64_t stage_activation_bytes(const ModelLayout& layout, int64_t global_batch, int64_t microbatches, int64_t rank,
                               Remat remat);

// One estimate per pipeline stage (one without stages), each on the stage's first rank (the ranks
// of a stage are alike in the layouts we support), for the config's batch, microbatches, schedule
// remat and optimizer.
std::vector<MemoryEstimate> estimate_stages(const ModelLayout& layout, const Config& config);
int64_t first_rank_of_stage(const ModelLayout& layout, int64_t stage);
int64_t fullest_stage(const std::vector<MemoryEstimate>& stages);  // the largest total; the first on ties

// The same model on one device with everything replicated (microbatches of global_batch / microbatches),
// a GPU (on_gpu) or a CPU, under `optimizer`.
MemoryEstimate estimate_unsharded_memory(const ModelConfig& model, int64_t global_batch, int64_t microbatches = 1,
                                         Remat remat = Remat::kNone, bool on_gpu = false,
                                         Optimizer optimizer = Optimizer::kAdamW);

}  // namespace spmd
