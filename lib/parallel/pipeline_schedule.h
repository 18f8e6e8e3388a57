// The order in which a pipeline stage runs its microbatches' forward and backward passes.
// Pure arithmetic: no tensors, no communication.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spmd {

struct PipelinePass {
  enum Kind { kForward, kBackward };
  Kind kind;
  int64_t microbatch;
  bool operator==(const PipelinePass& o) const { return kind == o.kind && microbatch == o.microbatch; }
};

// The passes of `stage` (of `stages`) over `microbatches`, in order. "gpipe": every forward, then
// every backward. "1f1b": as many forwards as stages after this one (the warm-up), then one
// forward and one backward in turn, then the remaining backwards; it holds at most `stages`
// microbatches' activations at once. Both orders cannot deadlock when sends do not block.
std::vector<PipelinePass> stage_passes(const std::string& schedule, int64_t stage, int64_t stages,
                                       int64_t microbatches);

// The most microbatches whose forward has run and backward not yet, over the passes.
int64_t max_in_flight(const std::vector<PipelinePass>& passes);

// The idle share of an ideal pipeline step (equal stages, free communication): (p-1)/(M+p-1).
double bubble_fraction(int64_t stages, int64_t microbatches);

}  // namespace spmd
