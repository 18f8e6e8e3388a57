// GPipe and 1F1B pass orders.
#include "parallel/pipeline_schedule.h"

#include <algorithm>

#include "util/error.h"

namespace spmd {

std::vector<PipelinePass> stage_passes(const std::string& schedule, int64_t stage, int64_t stages,
                                       int64_t microbatches) {
  SPMD_ASSERT(stage >= 0 && stage < stages && microbatches >= 1, "stage {} of {}, {} microbatches", stage, stages,
              microbatches);
  std::vector<PipelinePass> passes;
  const int64_t warmup = schedule == "gpipe" ? microbatches : std::min(stages - 1 - stage, microbatches);
  for (int64_t m = 0; m < warmup; ++m) passes.push_back({PipelinePass::kForward, m});
  for (int64_t m = warmup; m < microbatches; ++m) {  // steady state: one forward, one backward
    passes.push_back({PipelinePass::kForward, m});
    passes.push_back({PipelinePass::kBackward, m - warmup});
  }
  for (int64_t m = microbatches - warmup; m < microbatches; ++m) passes.push_back({PipelinePass::kBackward, m});
  return passes;
}

int64_t max_in_flight(const std::vector<PipelinePass>& passes) {
  int64_t live = 0, most = 0;
  for (const auto& p : passes) {
    live += p.kind == PipelinePass::kForward ? 1 : -1;
    most = std::max(most, live);
  }
  return most;
}

double bubble_fraction(int64_t stages, int64_t microbatches) {
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

}  // namespace spmd
