// The planner's cost model: a predicted step time for one layout, made of terms each of which
// can be checked against a measurement (bench/plan_validation.sh):
//   compute   the matmul FLOPs of the busiest device / the measured matmul rate (with
//             train.optimizer muon, its Newton-Schulz FLOPs included)
//   memory    the elementwise traffic (activations written, read back, their gradients; the AdamW
//             update) / the measured memory rate
//   comm      per mesh axis, bytes per collective through the axis's latency and bandwidth (Muon:
//             each matrix's all-gather and its owner's broadcast, "Muon gather/broadcast"; expert
//             parallelism: the routed rows' all-to-alls, "EP all-to-all")
//   bubble    the pipeline's idle slots under its schedule (less where idle ranks lend shared cores)
// No overlap of communication with compute is assumed (an upper bound where the runtime overlaps).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "inspect/memory_estimate.h"
#include "parallel/layout.h"
#include "plan/machine_rates.h"

namespace spmd {

struct StepCost {
  double flops = 0;        // matmul FLOPs of the busiest device per step (forward, backward, recompute, Muon's
                           // Newton-Schulz)
  double compute_s = 0;
  double memory_s = 0;
  std::map<std::string, double> comm_s;  // by what: "TP all-reduce (model)", "grad all-reduce (data)", ...
  double all_to_all_bytes = 0;  // expert parallelism: what the busiest device sends by all-to-all per step
  double bubble_s = 0;
  double total_s = 0;
  double comm_total() const;
  std::string dominant() const;  // the largest term's name
};

// Slots a pipeline step takes, in units of one microbatch's stage time: M + p - 1 for 1F1B and
// GPipe (the same bubble; they differ in memory), M + (p - 1) / v for interleaved 1F1B with v chunks.
double pipeline_fill_slots(PipelineSchedule schedule, int64_t stages, int64_t microbatches, int64_t virtual_stages = 1);

// The predicted step of `config` laid out as `layout`: that of its slowest pipeline stage.
// `stage_memory` holds each stage's memory estimate (estimate_stages), whose parameter bytes give
// the optimizer's traffic; the activations' comes from stage_activation_bytes (all of a stage's
// chunks, where the estimate holds one).
StepCost predict_step(const Config& config, const ModelLayout& layout, const std::vector<MemoryEstimate>& stage_memory,
                      const MachineRates& rates);

}  // namespace spmd
