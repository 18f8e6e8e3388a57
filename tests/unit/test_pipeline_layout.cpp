// Unit tests for pipeline stages: the GPipe and 1F1B pass orders, the blocks and parameters each
// stage holds (from a `layers` rule), the tied embedding on both ends, and the refusals of
// configs that cannot run (naming the key).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "config/config.h"
#include "parallel/layout.h"
#include "parallel/pipeline_schedule.h"
#include "usage_error.h"

using namespace spmd;
using spmd::test::usage_error_of;

namespace {
using P = PipelinePass;

// data x stage x model with the tiny model of the integration tests (n_layer 4).
Config pipeline_config(const std::vector<std::string>& overrides = {}) {
  const char* text = R"(mesh: {shape: [2, 4, 1], axes: [data, stage, model]}
sharding_rules: [[batch, data], [layers, stage], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]
model: {vocab_size: 72, block_size: 16, n_layer: 4, n_head: 8, n_embd: 32}
data: {train: t.bin, val: v.bin, batch_size: 8}
train: {steps: 2, microbatches: 4}
)";
  return parse_config(text, "p.yaml", overrides);
}

std::vector<int64_t> holders_along_stage(const ModelLayout& layout, const std::string& name) {
  return layout.param(name).sharding.placement().indices;
}
}  // namespace

TEST_CASE("pipeline schedule: GPipe runs every forward, then every backward") {
  const auto passes = stage_passes("gpipe", 1, 4, 3);
  const std::vector<P> want{{P::kForward, 0}, {P::kForward, 1}, {P::kForward, 2},
                            {P::kBackward, 0}, {P::kBackward, 1}, {P::kBackward, 2}};
  CHECK(passes == want);
  CHECK(max_in_flight(passes) == 3);
}

TEST_CASE("pipeline schedule: 1F1B warms up by the stages after it, then alternates") {
  // Stage 1 of 4 with 6 microbatches: 2 warm-up forwards, then F/B pairs, then 2 backwards.
  const std::vector<P> want{{P::kForward, 0},  {P::kForward, 1},  {P::kForward, 2},  {P::kBackward, 0},
                            {P::kForward, 3},  {P::kBackward, 1}, {P::kForward, 4},  {P::kBackward, 2},
                            {P::kForward, 5},  {P::kBackward, 3}, {P::kBackward, 4}, {P::kBackward, 5}};
  CHECK(stage_passes("1f1b", 1, 4, 6) == want);
  for (int64_t stage = 0; stage < 4; ++stage) {
    CAPTURE(stage);
    const auto passes = stage_passes("1f1b", stage, 4, 8);
    CHECK(passes.size() == 16);
    CHECK(max_in_flight(passes) == 4 - stage);  // at most `stages` microbatches in flight
    CHECK(max_in_flight(stage_passes("gpipe", stage, 4, 8)) == 8);
    // Every microbatch runs forward once and backward once, the backward after the forward.
    for (int64_t m = 0; m < 8; ++m) {
      auto f = std::find(passes.begin(), passes.end(), P{P::kForward, m});
      auto b = std::find(passes.begin(), passes.end(), P{P::kBackward, m});
      CHECK((f != passes.end() && b != passes.end() && f < b));
    }
  }
  // One stage: plain gradient accumulation, forward and backward in turn.
  const std::vector<P> alone{{P::kForward, 0}, {P::kBackward, 0}, {P::kForward, 1}, {P::kBackward, 1}};
  CHECK(stage_passes("1f1b", 0, 1, 2) == alone);
}

TEST_CASE("pipeline schedule: the ideal bubble is (p-1)/(M+p-1)") {
  CHECK(bubble_fraction(1, 8) == 0.0);
  CHECK(bubble_fraction(4, 8) == doctest::Approx(3.0 / 11.0));
  CHECK(bubble_fraction(2, 2) == doctest::Approx(1.0 / 3.0));
}

TEST_CASE("pipeline layout: a layers rule stages the blocks, embeddings first, head last, wte on both") {
  const ModelLayout layout = plan_layout(pipeline_config());
  CHECK(layout.pipeline.axis == "stage");
  CHECK(layout.pipeline.layer_begin == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(holders_along_stage(layout, "wte") == std::vector<int64_t>{0, 3});
  CHECK(holders_along_stage(layout, "wpe") == std::vector<int64_t>{0});
  CHECK(holders_along_stage(layout, "h.2.mlp.c_fc.weight") == std::vector<int64_t>{2});
  CHECK(holders_along_stage(layout, "ln_f.weight") == std::vector<int64_t>{3});
  // Rank 0 is (data 0, stage 0): it holds wte and block 0, not block 1; rank 3 is stage 3.
  const auto& c_fc1 = layout.param("h.1.mlp.c_fc.weight").sharding;
  CHECK(layout.stage_of(0) == 0);
  CHECK_FALSE(c_fc1.holds(0));
  CHECK(c_fc1.holds(1));
  CHECK(layout.param("wte").sharding.holds(3));
  CHECK_FALSE(layout.param("wte").sharding.holds(1));
  // wte's single primary copy (what a checkpoint writes) is on stage 0; its replicas on
  // stages 0 and 3 of both data indices form one replica group.
  CHECK(layout.param("wte").sharding.is_primary_replica(0));
  CHECK_FALSE(layout.param("wte").sharding.is_primary_replica(3));
  const auto groups = layout.param("wte").sharding.replica_groups();
  REQUIRE(groups.size() == 1);
  CHECK(groups[0] == std::vector<int64_t>{0, 3, 4, 7});
  // An explicit split.
  const ModelLayout split = plan_layout(pipeline_config({"model.n_layer=6", "runtime.pipeline_layers=[3, 1, 1, 1]"}));
  CHECK(split.pipeline.layer_begin == std::vector<int64_t>{0, 3, 4, 5, 6});
  // No layers rule: one stage holding everything.
  const ModelLayout flat = plan_layout(pipeline_config({"sharding_rules=[[batch, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]"}));
  CHECK(flat.pipeline.stages() == 1);
  CHECK(flat.param("h.1.mlp.c_fc.weight").sharding.holds(1));
}

TEST_CASE("pipeline layout: configs that cannot run are refused naming the key and the fix") {
  auto error = [](const std::vector<std::string>& overrides) {
    return usage_error_of([&] { plan_layout(pipeline_config(overrides)); });
  };
  const std::string few = error({"train.microbatches=2"});
  CHECK_MESSAGE(few.find("train.microbatches = 2") != std::string::npos, few);
  CHECK_MESSAGE(few.find("at least 4") != std::string::npos, few);
  const std::string uneven = error({"model.n_layer=6"});
  CHECK_MESSAGE(uneven.find("model.n_layer = 6") != std::string::npos, uneven);
  CHECK_MESSAGE(uneven.find("runtime.pipeline_layers") != std::string::npos, uneven);
  CHECK_MESSAGE(uneven.find("[2, 2, 1, 1]") != std::string::npos, uneven);
  const std::string sum = error({"runtime.pipeline_layers=[1, 1, 1, 2]"});
  CHECK_MESSAGE(sum.find("runtime.pipeline_layers") != std::string::npos, sum);
  CHECK_MESSAGE(sum.find("sums to 5") != std::string::npos, sum);
  const std::string count = error({"runtime.pipeline_layers=[2, 2]"});
  CHECK_MESSAGE(count.find("has 2 entries") != std::string::npos, count);
  const std::string batch = error({"data.batch_size=6"});
  CHECK_MESSAGE(batch.find("train.microbatches = 4") != std::string::npos, batch);
  CHECK_MESSAGE(batch.find("data.batch_size = 6") != std::string::npos, batch);
  const std::string on_batch = error({"data.batch_size=64", "sharding_rules=[[batch, [data, stage]], [layers, stage], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]"});
  CHECK_MESSAGE(on_batch.find("batch is also sharded") != std::string::npos, on_batch);
  const std::string two_axes = error({"sharding_rules=[[batch, data], [layers, [stage, model]], [vocab, null], [heads, null], [mlp, null], [embed, null], [seq, null], [kv, null]]"});
  CHECK_MESSAGE(two_axes.find("one mesh axis") != std::string::npos, two_axes);
  const std::string no_rule = error({"sharding_rules=[[batch, data], [vocab, model], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]",
                                     "runtime.pipeline_layers=[1, 1, 1, 1]"});
  CHECK_MESSAGE(no_rule.find("no sharding rule stages the blocks") != std::string::npos, no_rule);
  // A rule that also shards a parameter's dim over the stage axis.
  const std::string both = error({"sharding_rules=[[batch, data], [layers, stage], [vocab, stage], [heads, model], [mlp, model], [embed, null], [seq, null], [kv, null]]"});
  CHECK_MESSAGE(both.find("'stage'") != std::string::npos, both);
}
