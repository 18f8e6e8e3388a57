// The pipeline section of spmd-inspect: per stage its blocks, ends of the stack, memory and
// microbatches in flight; the schedule's ideal bubble. The arithmetic is pipeline_schedule.h's.
#include "inspect/pipeline_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "inspect/memory_estimate.h"
#include "inspect/schedule_report.h"
#include "inspect/text_table.h"
#include "mesh/render.h"
#include "parallel/pipeline_schedule.h"

namespace spmd {

namespace {
bool has_stages(const ModelLayout& layout) { return layout.pipeline.stages() > 1; }

std::string blocks_text(int64_t begin, int64_t end) {
  if (end == begin) return "no blocks";
  if (end - begin == 1) return fmt::format("h.{}", begin);
  return fmt::format("h.{}-h.{}", begin, end - 1);
}

// The blocks of each chunk of `stage`: "h.0-h.1" or, interleaved, "h.0, h.4" (chunks 0 and 1).
std::string stage_blocks_text(const PipelineLayout& pipeline, int64_t stage) {
  std::vector<std::string> chunks;
  for (int64_t k = 0; k < pipeline.chunks; ++k)
    chunks.push_back(blocks_text(pipeline.chunk_begin(stage, k), pipeline.chunk_end(stage, k)));
  return fmt::format("{}", fmt::join(chunks, ", "));
}

nlohmann::json chunk_ranges(const PipelineLayout& pipeline, int64_t stage) {
  nlohmann::json ranges = nlohmann::json::array();
  for (int64_t k = 0; k < pipeline.chunks; ++k)
    ranges.push_back({pipeline.chunk_begin(stage, k), pipeline.chunk_end(stage, k)});
  return ranges;
}

// "ln_f.weight" -> "ln_f"
std::string module_of(const std::string& name) { return name.substr(0, name.find('.')); }

void add_unique(std::vector<std::string>& v, const std::string& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

// The parameters used before the stack (first stage) and after it (last stage); a parameter used
// at both ends is the tied head.
std::string stack_ends_text(const ModelLayout& layout, int64_t stage) {
  std::vector<std::string> embeddings, after, tied;
  const bool first = stage == 0, last = stage == layout.pipeline.stages() - 1;
  for (const auto& p : layout.params) {
    if (p.info.layer >= 0) continue;
    if (first && p.info.before_stack) embeddings.push_back(p.info.name);
    if (last && p.info.after_stack) {
      if (p.info.before_stack) tied.push_back(p.info.name);
      else add_unique(after, module_of(p.info.name));
    }
  }
  if (!tied.empty()) after.push_back(fmt::format("head ({} tied)", fmt::join(tied, ", ")));
  std::string out;
  if (!embeddings.empty()) out += fmt::format(" + embeddings ({})", fmt::join(embeddings, ", "));
  if (!after.empty()) out += fmt::format(" + {}", fmt::join(after, ", "));
  return out;
}

std::vector<std::string> held_params(const ModelLayout& layout, int64_t stage) {
  const int64_t rank = first_rank_of_stage(layout, stage);
  std::vector<std::string> names;
  for (const auto& p : layout.params)
    if (p.sharding.holds(rank)) names.push_back(p.info.name);
  return names;
}

PipelineShape shape_of(const Config& config, const ModelLayout& layout) {
  return {config.runtime.pipeline_schedule, layout.pipeline.stages(), layout.pipeline.chunks, config.train.microbatches};
}

std::string bubble_text(const PipelineShape& shape) {
  return fmt::format("bubble (p-1)/(vM+p-1) = {}/{} = {:.1f}% of each step idle on every stage (ideal: equal "
                     "stages, free sends)",
                     shape.stages - 1, shape.chunks * shape.microbatches + shape.stages - 1,
                     100.0 * bubble_fraction(shape));
}
}  // namespace

std::string stage_contents(const ModelLayout& layout, int64_t stage) {
  return stage_blocks_text(layout.pipeline, stage) + stack_ends_text(layout, stage);
}

std::string pipeline_text(const Config& config, const ModelLayout& layout) {
  if (!has_stages(layout)) return "";
  const PipelineShape shape = shape_of(config, layout);
  const int64_t stages = shape.stages;
  std::string out = fmt::format("pipeline: blocks staged over mesh axis '{}' ({} stages{}), {} schedule, {} "
                                "microbatches per step\n  {}\n",
                                layout.pipeline.axis, stages,
                                shape.chunks > 1 ? fmt::format(" x {} chunks", shape.chunks) : "",
                                name_of(shape.schedule), shape.microbatches, bubble_text(shape));
  std::vector<std::vector<std::string>> rows{
      {"stage", "holds", "params+grads+AdamW",
       shape.chunks > 1 ? "activations = in flight x one microbatch-chunk" : "activations = in flight x one microbatch",
       "total/device"}};
  const auto estimates = estimate_stages(layout, config);
  for (int64_t s = 0; s < stages; ++s) {
    const MemoryEstimate& e = estimates[static_cast<size_t>(s)];
    rows.push_back({std::to_string(s), stage_contents(layout, s), human_bytes(e.params + e.grads + e.optimizer),
                    fmt::format("{} = {} x {}", human_bytes(e.activations), e.microbatches_in_flight,
                                human_bytes(e.activations_per_microbatch)),
                    human_bytes(e.total())});
  }
  return out + text_table(rows, "llrrr", "  ") + schedule_text(config, layout);
}

nlohmann::json pipeline_json(const Config& config, const ModelLayout& layout) {
  if (!has_stages(layout)) return nullptr;
  const PipelineShape shape = shape_of(config, layout);
  const int64_t stages = shape.stages;
  const auto estimates = estimate_stages(layout, config);
  nlohmann::json list = nlohmann::json::array();
  for (int64_t s = 0; s < stages; ++s) {
    const MemoryEstimate& e = estimates[static_cast<size_t>(s)];
    list.push_back({{"stage", s},
                    {"chunks", chunk_ranges(layout.pipeline, s)},  // [begin, end) of each chunk's blocks
                    {"holds", stage_contents(layout, s)},
                    {"params", held_params(layout, s)},
                    {"param_bytes", e.params},
                    {"param_grad_optimizer_bytes", e.params + e.grads + e.optimizer},
                    {"activation_bytes_per_microbatch", e.activations_per_microbatch},
                    {"microbatches_in_flight", e.microbatches_in_flight},
                    {"activation_bytes", e.activations},
                    {"gradient_send_bytes", e.gradient_sends},
                    {"total_bytes", e.total()}});
    if (shape.chunks == 1) list.back()["layers"] = list.back()["chunks"][0];
  }
  return {{"axis", layout.pipeline.axis},
          {"stages", stages},
          {"schedule", name_of(shape.schedule)},
          {"virtual_stages", shape.chunks},
          {"microbatches", shape.microbatches},
          {"bubble_fraction", bubble_fraction(shape)},
          {"stage_list", list},
          {"schedule_detail", schedule_json(config, layout)}};
}

}  // namespace spmd
