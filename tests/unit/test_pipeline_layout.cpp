// Unit tests for pipeline stages: the GPipe, 1F1B and interleaved pass orders and their timetables
// (no deadlock, the bubble the formula gives), the blocks and parameters each stage holds (from a
// `layers` rule; round-robin chunks when interleaved), the tied embedding on both ends, and the
// refusals of configs that cannot run (naming the key).
#include <doctest/doctest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "config/config.h"
#include "parallel/layout.h"
#include "parallel/pipeline_schedule.h"
#include "usage_error.h"

using namespace spmd;
using spmd::test::usage_error_of;

namespace spmd {
// A failed comparison of schedules prints each pass, e.g. "F0" or "B2.1" (microbatch.chunk).
std::ostream& operator<<(std::ostream& os, const PipelinePass& p) {
  os << (p.kind == PipelinePass::kForward ? "F" : "B") << p.microbatch;
  return p.chunk ? os << "." << p.chunk : os;
}
}  // namespace spmd

namespace {
using P = PipelinePass;
using S = PipelineSchedule;

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

std::vector<P> passes_of(S schedule, int64_t stage, int64_t stages, int64_t microbatches,
                         int64_t chunks = 1) {
  return stage_passes({schedule, stages, chunks, microbatches}, stage);
}

std::vector<int64_t> holders_along_stage(const ModelLayout& layout, const std::string& name) {
  return layout.param(name).sharding.placement().indices;
}
}  // namespace

TEST_CASE("pipeline schedule: GPipe runs every forward, then every backward") {
  const auto passes = passes_of(S::kGPipe, 1, 4, 3);
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
  CHECK(passes_of(S::kOneFOneB, 1, 4, 6) == want);
  for (int64_t stage = 0; stage < 4; ++stage) {
    CAPTURE(stage);
    const auto passes = passes_of(S::kOneFOneB, stage, 4, 8);
    CHECK(passes.size() == 16);
    CHECK(max_in_flight(passes) == 4 - stage);  // at most `stages` microbatches in flight
    CHECK(max_in_flight(passes_of(S::kGPipe, stage, 4, 8)) == 8);
    // Every microbatch runs forward once and backward once, the backward after the forward.
    for (int64_t m = 0; m < 8; ++m) {
      auto f = std::find(passes.begin(), passes.end(), P{P::kForward, m});
      auto b = std::find(passes.begin(), passes.end(), P{P::kBackward, m});
      CHECK((f != passes.end() && b != passes.end() && f < b));
    }
  }
  // One stage: plain gradient accumulation, forward and backward in turn.
  const std::vector<P> alone{{P::kForward, 0}, {P::kBackward, 0}, {P::kForward, 1}, {P::kBackward, 1}};
  CHECK(passes_of(S::kOneFOneB, 0, 1, 2) == alone);
}

TEST_CASE("pipeline schedule: the ideal bubble is (p-1)/(vM+p-1)") {
  CHECK(bubble_fraction({S::kOneFOneB, 1, 1, 8}) == 0.0);
  CHECK(bubble_fraction({S::kOneFOneB, 4, 1, 8}) == doctest::Approx(3.0 / 11.0));
  CHECK(bubble_fraction({S::kGPipe, 2, 1, 2}) == doctest::Approx(1.0 / 3.0));
  CHECK(bubble_fraction({S::kInterleaved, 4, 2, 8}) == doctest::Approx(3.0 / 19.0));
}

TEST_CASE("pipeline schedule: interleaved runs chunks in groups of p microbatches, backwards in reverse") {
  // Stage 1 of 2, 2 chunks, 4 microbatches: warm-up 2 (p-1-s) + (v-1) p = 2 forwards, F/B pairs,
  // then the last 2 backwards. Forwards: (m0 c0) (m1 c0) (m0 c1) (m1 c1) (m2 c0) ...;
  // backwards start on the last chunk.
  const std::vector<P> want{{P::kForward, 0, 0},  {P::kForward, 1, 0},  {P::kForward, 0, 1},  {P::kBackward, 0, 1},
                            {P::kForward, 1, 1},  {P::kBackward, 1, 1}, {P::kForward, 2, 0},  {P::kBackward, 0, 0},
                            {P::kForward, 3, 0},  {P::kBackward, 1, 0}, {P::kForward, 2, 1},  {P::kBackward, 2, 1},
                            {P::kForward, 3, 1},  {P::kBackward, 3, 1}, {P::kBackward, 2, 0}, {P::kBackward, 3, 0}};
  CHECK(passes_of(S::kInterleaved, 1, 2, 4, 2) == want);
  for (int64_t stages : {2, 3, 4}) {
    for (int64_t chunks : {2, 3}) {
      for (int64_t m = stages; m <= 3 * stages; m += stages) {
        for (int64_t stage = 0; stage < stages; ++stage) {
          CAPTURE(stages);
          CAPTURE(chunks);
          CAPTURE(m);
          CAPTURE(stage);
          const auto passes = passes_of(S::kInterleaved, stage, stages, m, chunks);
          REQUIRE(passes.size() == static_cast<size_t>(2 * m * chunks));
          for (int64_t mb = 0; mb < m; ++mb) {  // each (microbatch, chunk) once each way, forward first
            for (int64_t c = 0; c < chunks; ++c) {
              auto f = std::find(passes.begin(), passes.end(), P{P::kForward, mb, c});
              auto b = std::find(passes.begin(), passes.end(), P{P::kBackward, mb, c});
              CHECK((f != passes.end() && b != passes.end() && f < b));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("pipeline schedule: no order deadlocks, and the timetable's idle share is the formula's") {
  for (S schedule : {S::kGPipe, S::kOneFOneB, S::kInterleaved}) {
    for (int64_t stages : {1, 2, 3, 4}) {
      for (int64_t chunks : {1, 2, 3, 4}) {
        if ((schedule == S::kInterleaved) != (chunks > 1)) continue;
        for (int64_t m = stages; m <= 4 * stages; m += stages) {
          CAPTURE(name_of(schedule));
          CAPTURE(stages);
          CAPTURE(chunks);
          CAPTURE(m);
          const PipelineShape shape{schedule, stages, chunks, m};
          PipelineTimetable table;
          REQUIRE_NOTHROW(table = pipeline_timetable(shape));
          // Each stage is busy 2 v M slots; the ideal step is 2 (v M + p - 1) slots long.
          CHECK(table.length() == 2 * (chunks * m + stages - 1));
          CHECK(table.idle_fraction() == doctest::Approx(bubble_fraction(shape)));
        }
      }
    }
  }
  // Interleaving shrinks the bubble by v against 1F1B: p = 4, M = 8.
  const double one_f_one_b = pipeline_timetable({S::kOneFOneB, 4, 1, 8}).idle_fraction();
  const double interleaved = pipeline_timetable({S::kInterleaved, 4, 2, 8}).idle_fraction();
  CHECK(one_f_one_b == doctest::Approx(3.0 / 11.0));
  CHECK(interleaved == doctest::Approx(3.0 / 19.0));
}

TEST_CASE("pipeline schedule: the timetable refuses orders that wait on each other") {
  // The check that guards the real orders must catch a real cycle: stage 0 waits for microbatch
  // 1's backward before it sends microbatch 1's forward on which that backward depends.
  const std::vector<std::vector<P>> cyclic{
      {{P::kForward, 0}, {P::kBackward, 1}, {P::kForward, 1}, {P::kBackward, 0}},
      {{P::kForward, 0}, {P::kBackward, 0}, {P::kForward, 1}, {P::kBackward, 1}}};
  const std::string message = [&] {
    try {
      pipeline_timetable({S::kOneFOneB, 2, 1, 2}, cyclic);
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  CHECK_MESSAGE(message.find("stages 0, 1 wait on each other") != std::string::npos, message);
  CHECK_NOTHROW(
      pipeline_timetable({S::kOneFOneB, 2, 1, 2}, {passes_of(S::kOneFOneB, 0, 2, 2), passes_of(S::kOneFOneB, 1, 2, 2)}));
}

TEST_CASE("pipeline schedule: a replay with measured pass times and hand-overs, worked by hand") {
  // 1F1B, 2 stages, 2 microbatches; forwards 1, backwards 2, each hand-over 0.5.
  // Stage 0: F0 [0,1] F1 [1,2] B0 [5,7] B1 [8,10]; stage 1: F0 [1.5,2.5] B0 [2.5,4.5] F1 [4.5,5.5] B1 [5.5,7.5].
  const PipelineShape shape{S::kOneFOneB, 2, 1, 2};
  const std::vector<std::vector<PipelinePass>> orders{stage_passes(shape, 0), stage_passes(shape, 1)};
  const std::vector<std::vector<double>> durations{{1, 1, 2, 2}, {1, 2, 1, 2}};
  const PipelineReplay replay = pipeline_replay(shape, orders, durations, 0.5);
  CHECK(replay.start[0] == std::vector<double>{0, 1, 5, 8});
  CHECK(replay.start[1] == std::vector<double>{1.5, 2.5, 4.5, 5.5});
  CHECK(replay.makespan == 10);
  CHECK(replay.busy == std::vector<double>{6, 6});
  for (double idle : replay.idle_fractions()) CHECK(idle == doctest::Approx(0.4));
  // Free hand-overs: stage 1's F0 starts at 1 and its B1 ends at 7; stage 0's B1 runs [7, 9].
  CHECK(pipeline_replay(shape, orders, durations, 0.0).makespan == 9);
  // Durations that do not match the passes are a programming error, named.
  CHECK_THROWS(pipeline_replay(shape, orders, {{1, 1}, {1, 2, 1, 2}}, 0.0));
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

TEST_CASE("pipeline layout: interleaved chunks go round-robin, chunk k of stage s is virtual stage k p + s") {
  const ModelLayout layout = plan_layout(pipeline_config(
      {"model.n_layer=8", "runtime.pipeline_schedule=interleaved", "runtime.virtual_stages=2"}));
  const PipelineLayout& pipe = layout.pipeline;
  CHECK(pipe.stages() == 4);
  CHECK(pipe.chunks == 2);
  CHECK(pipe.virtual_stages() == 8);
  for (int64_t layer = 0; layer < 8; ++layer) CHECK(pipe.stage_of_layer(layer) == layer % 4);
  CHECK(pipe.chunk_begin(1, 0) == 1);
  CHECK(pipe.chunk_begin(1, 1) == 5);
  CHECK(pipe.blocks_of_stage(3) == 2);
  CHECK(holders_along_stage(layout, "h.5.mlp.c_fc.weight") == std::vector<int64_t>{1});
  CHECK(holders_along_stage(layout, "wte") == std::vector<int64_t>{0, 3});  // first and last virtual stage
  CHECK(holders_along_stage(layout, "ln_f.weight") == std::vector<int64_t>{3});
  // An explicit split names a block count per virtual stage.
  const ModelLayout split = plan_layout(pipeline_config({"model.n_layer=10", "runtime.pipeline_schedule=interleaved",
                                                         "runtime.virtual_stages=2",
                                                         "runtime.pipeline_layers=[2, 1, 1, 1, 2, 1, 1, 1]"}));
  CHECK(split.pipeline.chunk_begin(0, 1) == 5);
  CHECK(split.pipeline.blocks_of_stage(0) == 4);
}

TEST_CASE("pipeline layout: interleaved configs that cannot run name the keys and the smallest valid values") {
  auto error = [](const std::vector<std::string>& overrides) {
    return usage_error_of([&] { plan_layout(pipeline_config(overrides)); });
  };
  const std::vector<std::string> interleaved{"model.n_layer=8", "runtime.pipeline_schedule=interleaved",
                                             "runtime.virtual_stages=2"};
  auto with = [](std::vector<std::string> a, const std::string& b) {
    a.push_back(b);
    return a;
  };
  // 6 microbatches on 4 stages: groups of 4; the smallest valid count is 8. (batch 8 x 2 data ranks.)
  const std::string groups = error(with(with(interleaved, "train.microbatches=6"), "data.batch_size=24"));
  CHECK_MESSAGE(groups.find("train.microbatches = 6") != std::string::npos, groups);
  CHECK_MESSAGE(groups.find("runtime.pipeline_schedule: interleaved") != std::string::npos, groups);
  CHECK_MESSAGE(groups.find("the smallest valid value is 8") != std::string::npos, groups);
  const std::string few = error(with(interleaved, "train.microbatches=2"));
  CHECK_MESSAGE(few.find("the smallest valid value is 4") != std::string::npos, few);
  const std::string blocks = error({"model.n_layer=4", "runtime.pipeline_schedule=interleaved", "runtime.virtual_stages=2"});
  CHECK_MESSAGE(blocks.find("8 virtual stages") != std::string::npos, blocks);
  CHECK_MESSAGE(blocks.find("runtime.virtual_stages = 2") != std::string::npos, blocks);
  const std::string one_chunk = error({"model.n_layer=8", "runtime.pipeline_schedule=interleaved"});
  CHECK_MESSAGE(one_chunk.find("runtime.virtual_stages of at least 2") != std::string::npos, one_chunk);
  const std::string wrong_schedule = error({"model.n_layer=8", "runtime.virtual_stages=2"});
  CHECK_MESSAGE(wrong_schedule.find("needs runtime.pipeline_schedule: interleaved") != std::string::npos, wrong_schedule);
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
