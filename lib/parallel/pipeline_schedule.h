// The order in which a pipeline stage runs its microbatches' forward and backward passes, and a
// timetable of all stages' passes under that order. Pure arithmetic: no tensors, no communication.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/choices.h"

namespace spmd {

struct PipelinePass {
  enum Kind { kForward, kBackward };
  Kind kind;
  int64_t microbatch;
  int64_t chunk = 0;  // which of the stage's virtual stages (interleaved); 0 otherwise
  bool operator==(const PipelinePass& o) const {
    return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk;
  }
};

// A schedule over `stages` ranks, each holding `chunks` virtual stages (chunk k of stage s is
// virtual stage k * stages + s), running `microbatches` per step.
struct PipelineShape {
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;
  int64_t stages = 1, chunks = 1, microbatches = 1;
  int64_t virtual_stages() const { return stages * chunks; }
};

// The passes of `stage`, in order. GPipe: every forward, then every backward. 1F1B: as many
// forwards as stages after this one (the warm-up), then one forward and one backward in turn,
// then the remaining backwards; at most `stages` microbatches' activations at once.
// Interleaved (Megatron's virtual pipeline): forwards go through the chunks in groups of
// `stages` microbatches (chunk 0 for the group, then chunk 1, ...), backwards through the chunks in
// reverse; the warm-up is 2 (stages - 1 - stage) + (chunks - 1) stages forwards. Every order
// cannot deadlock when sends do not block (pipeline_timetable checks it).
std::vector<PipelinePass> stage_passes(const PipelineShape& shape, int64_t stage);

// The most (microbatch, chunk) pairs whose forward has run and backward not yet, over the passes.
int64_t max_in_flight(const std::vector<PipelinePass>& passes);

// The idle share of an ideal pipeline step (equal stages, free communication, a backward as long
// as a forward): (p-1)/(v M + p-1); 1F1B and GPipe have v = 1.
double bubble_fraction(const PipelineShape& shape);

// Every stage's passes placed on a clock of equal slots (one pass per slot): a pass starts once
// its stage is free and the pass it needs from a neighbour (the previous virtual stage's forward,
// the next one's backward) has ended.
struct PipelineTimetable {
  // slots[stage][t]: the pass `stage` runs in slot t, or none (idle).
  struct Slot {
    bool busy = false;
    PipelinePass pass{PipelinePass::kForward, 0, 0};
  };
  std::vector<std::vector<Slot>> slots;
  int64_t length() const { return slots.empty() ? 0 : static_cast<int64_t>(slots[0].size()); }
  double idle_fraction() const;  // idle slots over all slots, every stage
};

// Every stage's passes replayed on a clock with their own durations: a pass starts once its stage
// is free and the pass it needs from a neighbour has ended, `hop` later (the transfer). With
// measured pass times this is the step a device per rank would take (bench_train replays the
// passes of ranks that share cores).
struct PipelineReplay {
  std::vector<std::vector<double>> start;  // [stage][i]: when orders[stage][i] starts
  std::vector<double> busy;                // [stage]: the sum of its passes' durations
  double makespan = 0;                     // when the last pass ends
  std::vector<double> idle_fractions() const;  // [stage]: 1 - busy / makespan
};

// durations[stage][i] is the time of orders[stage][i]. Throws a RuntimeError naming the stuck
// stages if the orders wait on each other (a deadlock).
PipelineReplay pipeline_replay(const PipelineShape& shape, const std::vector<std::vector<PipelinePass>>& orders,
                               const std::vector<std::vector<double>>& durations, double hop);

// The timetable of the given per-stage orders (stage_passes' by default). Throws a RuntimeError
// naming the stuck stages if the orders wait on each other (a deadlock).
PipelineTimetable pipeline_timetable(const PipelineShape& shape, const std::vector<std::vector<PipelinePass>>& orders);
PipelineTimetable pipeline_timetable(const PipelineShape& shape);

}  // namespace spmd
