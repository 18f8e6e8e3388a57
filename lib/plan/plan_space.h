// The layouts the planner considers for N devices: every factorization of N over the data,
// fsdp, context, model and stage axes (and, for a model with experts, an expert axis), with the
// rule set each implies, and the settings that
// trade memory for time (sequence parallelism, microbatches, pipeline schedule, recomputation).
// A layout is valid when the rules engine (plan_layout) accepts it for the model: the planner
// never second-guesses it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "parallel/layout.h"

namespace spmd {

struct PlanChoice {
  int64_t data = 1, fsdp = 1, model = 1, stage = 1;  // mesh axis sizes; with context's, their product is N
  int64_t context = 1;                                // [seq, context] onto a weight-free axis: context parallelism
  // Expert parallelism (model.moe only): an own `expert` axis that splits the batch too, with
  // [expert, expert]; or the experts over the data-parallel ranks, [expert, data]; or neither.
  int64_t expert = 1;
  bool experts_on_data = false;
  bool sequence_parallel = false;                     // [seq, model]: needs model > 1
  int64_t microbatches = 1;
  PipelineSchedule schedule = PipelineSchedule::kOneFOneB;  // with stages only
  int64_t virtual_stages = 1;                         // chunks per stage (interleaved: 2)
  Remat remat = Remat::kNone;
  ContextExchange context_exchange = ContextExchange::kAllGather;  // with a context axis only
};

// "DP2 FSDP2 CP2 TP2 PP2 1f1b M4 remat:full": what is sharded, in words short enough for a table;
// experts: "DP2 EP2" (an own axis of 2) or "DP2 EP2(data)" (over the data axis).
std::string describe_choice(const PlanChoice& choice);
// Where the experts are split: "none", "data" or "expert".
std::string experts_on(const PlanChoice& choice);

// The base config with the choice's mesh (axes of size 1 left out, in the order stage, data,
// fsdp, expert, context, model), its sharding rules and its runtime settings; everything else unchanged.
Config plan_config(const Config& base, const PlanChoice& choice);

struct PlanCandidate {
  PlanChoice choice;
  Config config;
  ModelLayout layout;
};

// Every choice for `devices` whose config the rules engine accepts for the base's model and batch.
std::vector<PlanCandidate> enumerate_plans(const Config& base, int64_t devices);

}  // namespace spmd
