// Enumerating layouts: factorizations (data, fsdp, context, model, stage) x rule variants x
// memory/time settings, kept where plan_layout accepts them.
#include "plan/plan_space.h"

#include <fmt/format.h>

#include "util/error.h"

namespace spmd {

namespace {
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Every (data, fsdp, expert, context, model, stage) with product `devices` (expert 1 unless the
// model has experts). Context degrees whose head-tail chunks the sequence cannot hold
// (block_size % 2cp) are plan_layout's to refuse.
std::vector<PlanChoice> meshes(int64_t devices, bool experts) {
  std::vector<PlanChoice> out;
  for (int64_t data : divisors(devices))
    for (int64_t fsdp : divisors(devices / data))
      // An own expert axis beside a data axis only: alone it is [expert, data] by another name.
      for (int64_t expert : experts && data > 1 ? divisors(devices / data / fsdp) : std::vector<int64_t>{1})
        for (int64_t context : divisors(devices / data / fsdp / expert))
          for (int64_t model : divisors(devices / data / fsdp / expert / context)) {
            PlanChoice c;
            c.data = data, c.fsdp = fsdp, c.expert = expert, c.context = context, c.model = model;
            c.stage = devices / data / fsdp / expert / context / model;
            out.push_back(c);
          }
  return out;
}

// Where a mesh's experts may go: its own axis when it has one; else nowhere or, with a data
// axis, over the data-parallel ranks.
std::vector<bool> expert_placements(const PlanChoice& mesh, bool experts) {
  if (!experts || mesh.expert > 1 || mesh.data == 1) return {false};
  return {false, true};
}

// Microbatch counts worth trying: gradient accumulation 1, 2, 4, 8 without stages; with p stages
// p, 2p, 4p (fewer than p cannot run; more shrinks the bubble and the activations in flight).
std::vector<int64_t> microbatch_counts(const PlanChoice& c) {
  if (c.stage == 1) return {1, 2, 4, 8};
  return {c.stage, 2 * c.stage, 4 * c.stage};
}

std::vector<PlanChoice> variants(const PlanChoice& mesh, bool experts) {
  std::vector<PlanChoice> out;
  using Schedule = PipelineSchedule;
  using Exchange = ContextExchange;
  const std::vector<Schedule> schedules =
      mesh.stage > 1 ? std::vector<Schedule>{Schedule::kOneFOneB, Schedule::kGPipe, Schedule::kInterleaved}
                     : std::vector<Schedule>{Schedule::kOneFOneB};
  const std::vector<Exchange> exchanges =
      mesh.context > 1 ? std::vector<Exchange>{Exchange::kAllGather, Exchange::kRing}
                       : std::vector<Exchange>{Exchange::kAllGather};
  for (bool on_data : expert_placements(mesh, experts))
    for (bool sp : mesh.model > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false})
      for (int64_t m : microbatch_counts(mesh))
        for (Schedule schedule : schedules)
          for (Remat remat : {Remat::kNone, Remat::kSelective, Remat::kFull})
            for (Exchange exchange : exchanges) {
              PlanChoice c = mesh;
              c.experts_on_data = on_data;
              c.sequence_parallel = sp, c.microbatches = m, c.schedule = schedule, c.remat = remat;
              c.virtual_stages = schedule == Schedule::kInterleaved ? 2 : 1;  // n_layer must split into p * 2 chunks
              c.context_exchange = exchange;
              out.push_back(c);
            }
  return out;
}

ShardingRule rule(const std::string& logical, std::vector<std::string> axes) { return {logical, std::move(axes)}; }
}  // namespace

std::string describe_choice(const PlanChoice& c) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : " ") + part; };
  if (c.data > 1) add(fmt::format("DP{}", c.data));
  if (c.fsdp > 1) add(fmt::format("FSDP{}", c.fsdp));
  if (c.expert > 1) add(fmt::format("EP{}", c.expert));
  if (c.experts_on_data) add(fmt::format("EP{}(data)", c.data));
  if (c.context > 1) add(fmt::format("CP{}{}", c.context, c.context_exchange == ContextExchange::kRing ? "-ring" : ""));
  if (c.model > 1) add(fmt::format("TP{}{}", c.model, c.sequence_parallel ? "+SP" : ""));
  if (c.stage > 1)
    add(c.virtual_stages > 1 ? fmt::format("PP{} {}:{}", c.stage, name_of(c.schedule), c.virtual_stages)
                             : fmt::format("PP{} {}", c.stage, name_of(c.schedule)));
  if (s.empty()) add("1 device");
  if (c.microbatches > 1) add(fmt::format("M{}", c.microbatches));
  if (c.remat != Remat::kNone) add("remat:" + name_of(c.remat));
  return s;
}

std::string experts_on(const PlanChoice& c) {
  if (c.expert > 1) return "expert";
  return c.experts_on_data ? "data" : "none";
}

Config plan_config(const Config& base, const PlanChoice& c) {
  Config config = base;
  config.mesh.shape.clear();
  config.mesh.axes.clear();
  for (auto [name, size] : {std::pair<const char*, int64_t>{"stage", c.stage}, {"data", c.data}, {"fsdp", c.fsdp},
                            {"expert", c.expert}, {"context", c.context}, {"model", c.model}})
    if (size > 1) config.mesh.shape.push_back(size), config.mesh.axes.push_back(name);
  if (config.mesh.shape.empty()) config.mesh = MeshConfig{};
  std::vector<std::string> batch, embed, tensor, seq, layers;
  if (c.data > 1) batch.push_back("data");
  if (c.fsdp > 1) batch.push_back("fsdp"), embed.push_back("fsdp");
  if (c.expert > 1) batch.push_back("expert");  // an expert axis must split the batch (plan_layout checks)
  if (c.model > 1) tensor.push_back("model");
  if (c.sequence_parallel) seq.push_back("model");
  if (c.context > 1) seq.push_back("context");  // a weight-free axis: context parallelism
  if (c.stage > 1) layers.push_back("stage");
  config.sharding_rules = {rule("batch", batch), rule("layers", layers), rule("vocab", tensor),
                           rule("heads", tensor), rule("mlp", tensor),  rule("embed", embed),
                           rule("seq", seq),      rule("kv", {})};
  if (base.model.moe.enabled())
    config.sharding_rules.push_back(
        rule("expert", c.expert > 1 ? std::vector<std::string>{"expert"}
                                    : c.experts_on_data ? std::vector<std::string>{"data"} : std::vector<std::string>{}));
  config.train.microbatches = c.microbatches;
  config.runtime.pipeline_schedule = c.schedule;
  config.runtime.virtual_stages = c.virtual_stages;
  config.runtime.pipeline_layers.clear();
  config.runtime.remat = c.remat;
  config.runtime.context_exchange = c.context_exchange;
  config.resolved_yaml = to_yaml(config);
  return config;
}

std::vector<PlanCandidate> enumerate_plans(const Config& base, int64_t devices) {
  std::vector<PlanCandidate> out;
  const bool experts = base.model.moe.enabled();
  for (const PlanChoice& mesh : meshes(devices, experts))
    for (const PlanChoice& c : variants(mesh, experts)) {
      Config config = plan_config(base, c);
      try {
        ModelLayout layout = plan_layout(config);
        out.push_back({c, std::move(config), std::move(layout)});
      } catch (const UsageError&) {
        // Not valid for this model or batch (a size that does not divide, too few microbatches).
      }
    }
  return out;
}

}  // namespace spmd
