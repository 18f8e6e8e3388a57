// GPipe, 1F1B and interleaved 1F1B pass orders, and the timetable they give.
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd {

namespace {
// Forwards then backwards around a steady state of one forward, one backward: `forward(k)` and
// `backward(k)` name the k-th of each on this stage.
template <typename Forward, typename Backward>
std::vector<PipelinePass> one_forward_one_backward(int64_t warmup, int64_t total, Forward forward, Backward backward) {
  std::vector<PipelinePass> passes;
  for (int64_t k = 0; k < warmup; ++k) passes.push_back(forward(k));
  for (int64_t k = warmup; k < total; ++k) {
    passes.push_back(forward(k));
    passes.push_back(backward(k - warmup));
  }
  for (int64_t k = total - warmup; k < total; ++k) passes.push_back(backward(k));
  return passes;
}

// Megatron's virtual pipeline: the k-th forward of a stage takes microbatch group k / (p v), chunk
// (k mod p v) / p within it, microbatch p * group + k mod p; backwards run the chunks in reverse.
std::vector<PipelinePass> interleaved_passes(const PipelineShape& shape, int64_t stage) {
  const int64_t p = shape.stages, v = shape.chunks, total = shape.microbatches * v;
  SPMD_ASSERT(shape.microbatches % p == 0, "interleaved: {} microbatches, {} stages", shape.microbatches, p);
  auto pass = [p, v](PipelinePass::Kind kind, int64_t k) {
    const int64_t in_group = k % (p * v), chunk = in_group / p;
    return PipelinePass{kind, k / (p * v) * p + k % p, kind == PipelinePass::kForward ? chunk : v - 1 - chunk};
  };
  const int64_t warmup = std::min(total, 2 * (p - 1 - stage) + (v - 1) * p);
  return one_forward_one_backward(
      warmup, total, [&](int64_t k) { return pass(PipelinePass::kForward, k); },
      [&](int64_t k) { return pass(PipelinePass::kBackward, k); });
}
}  // namespace

std::vector<PipelinePass> stage_passes(const PipelineShape& shape, int64_t stage) {
  const int64_t m = shape.microbatches;
  SPMD_ASSERT(stage >= 0 && stage < shape.stages && m >= 1 && shape.chunks >= 1, "stage {} of {}, {} microbatches",
              stage, shape.stages, m);
  if (shape.schedule == PipelineSchedule::kInterleaved) return interleaved_passes(shape, stage);
  SPMD_ASSERT(shape.chunks == 1, "schedule {} runs one chunk per stage, not {}", name_of(shape.schedule), shape.chunks);
  const int64_t warmup = shape.schedule == PipelineSchedule::kGPipe ? m : std::min(shape.stages - 1 - stage, m);
  return one_forward_one_backward(
      warmup, m, [](int64_t k) { return PipelinePass{PipelinePass::kForward, k}; },
      [](int64_t k) { return PipelinePass{PipelinePass::kBackward, k}; });
}

int64_t max_in_flight(const std::vector<PipelinePass>& passes) {
  int64_t live = 0, most = 0;
  for (const auto& p : passes) {
    live += p.kind == PipelinePass::kForward ? 1 : -1;
    most = std::max(most, live);
  }
  return most;
}

double bubble_fraction(const PipelineShape& shape) {
  const auto idle = static_cast<double>(shape.stages - 1);
  return idle / (static_cast<double>(shape.chunks * shape.microbatches) + idle);
}

double PipelineTimetable::idle_fraction() const {
  int64_t idle = 0, all = 0;
  for (const auto& row : slots) {
    for (const auto& s : row) idle += s.busy ? 0 : 1;
    all += static_cast<int64_t>(row.size());
  }
  return all == 0 ? 0.0 : static_cast<double>(idle) / static_cast<double>(all);
}

namespace {
using PassKey = std::tuple<int, int64_t, int64_t>;  // kind, microbatch, virtual stage

// The pass on a neighbouring virtual stage that `pass` on `virtual_stage` waits for, if any.
bool needs_neighbour(const PipelineShape& shape, const PipelinePass& pass, int64_t virtual_stage, PassKey& needed) {
  if (pass.kind == PipelinePass::kForward) {
    needed = {PipelinePass::kForward, pass.microbatch, virtual_stage - 1};
    return virtual_stage > 0;
  }
  needed = {PipelinePass::kBackward, pass.microbatch, virtual_stage + 1};
  return virtual_stage + 1 < shape.virtual_stages();
}
}  // namespace

PipelineTimetable pipeline_timetable(const PipelineShape& shape) {
  std::vector<std::vector<PipelinePass>> orders;
  for (int64_t s = 0; s < shape.stages; ++s) orders.push_back(stage_passes(shape, s));
  return pipeline_timetable(shape, orders);
}

std::vector<double> PipelineReplay::idle_fractions() const {
  std::vector<double> idle;
  for (double b : busy) idle.push_back(makespan > 0 ? 1.0 - b / makespan : 0.0);
  return idle;
}

PipelineReplay pipeline_replay(const PipelineShape& shape, const std::vector<std::vector<PipelinePass>>& orders,
                               const std::vector<std::vector<double>>& durations, double hop) {
  const auto p = static_cast<size_t>(shape.stages);
  SPMD_ASSERT(orders.size() == p && durations.size() == p, "{} orders, {} durations for {} stages", orders.size(),
              durations.size(), p);
  PipelineReplay replay;
  replay.start.resize(p);
  replay.busy.assign(p, 0.0);
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  std::map<PassKey, double> ends;  // when each finished pass's output is ready
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (size_t s = 0; s < p; ++s) {
      SPMD_ASSERT(durations[s].size() == orders[s].size(), "stage {}: {} durations for {} passes", s,
                  durations[s].size(), orders[s].size());
      for (; next[s] < orders[s].size(); ++next[s]) {
        const PipelinePass& pass = orders[s][next[s]];
        const int64_t vs = pass.chunk * shape.stages + static_cast<int64_t>(s);
        PassKey needed;
        double start = free_at[s];
        if (needs_neighbour(shape, pass, vs, needed)) {
          auto it = ends.find(needed);
          if (it == ends.end()) break;  // blocked in a receive
          start = std::max(start, it->second + hop);
        }
        const double duration = durations[s][next[s]];
        replay.start[s].push_back(start);
        replay.busy[s] += duration;
        free_at[s] = start + duration;
        ends[{pass.kind, pass.microbatch, vs}] = free_at[s];
        progressed = true;
      }
    }
  }
  std::vector<size_t> stuck;
  for (size_t s = 0; s < p; ++s)
    if (next[s] < orders[s].size()) stuck.push_back(s);
  if (!stuck.empty())
    throw RuntimeError(fmt::format("{} schedule, {} stages x {} chunks, {} microbatches: stages {} wait on each other",
                                   name_of(shape.schedule), shape.stages, shape.chunks, shape.microbatches,
                                   fmt::join(stuck, ", ")));
  replay.makespan = *std::max_element(free_at.begin(), free_at.end());
  return replay;
}

PipelineTimetable pipeline_timetable(const PipelineShape& shape, const std::vector<std::vector<PipelinePass>>& orders) {
  std::vector<std::vector<double>> unit;
  for (const auto& order : orders) unit.emplace_back(order.size(), 1.0);
  const PipelineReplay replay = pipeline_replay(shape, orders, unit, 0.0);
  PipelineTimetable table;
  table.slots.assign(orders.size(), std::vector<PipelineTimetable::Slot>(static_cast<size_t>(replay.makespan)));
  for (size_t s = 0; s < orders.size(); ++s)
    for (size_t i = 0; i < orders[s].size(); ++i)
      table.slots[s][static_cast<size_t>(replay.start[s][i])] = {true, orders[s][i]};
  return table;
}

}  // namespace spmd
