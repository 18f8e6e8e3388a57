// The schedule section of spmd-inspect; the arithmetic is pipeline_schedule.h's.
#include "inspect/schedule_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "inspect/text_table.h"
#include "parallel/pipeline_schedule.h"

namespace spmd {

namespace {
constexpr int64_t kMostSlotsShown = 40;  // a wider timetable goes to --json only

PipelineShape config_shape(const Config& config, const ModelLayout& layout) {
  return {config.runtime.pipeline_schedule, layout.pipeline.stages(), layout.pipeline.chunks, config.train.microbatches};
}

// The shapes to compare: gpipe, 1f1b, and interleaved with the config's chunks (2 when it has
// none) where the microbatches come in whole groups of `stages`.
std::vector<PipelineShape> compared_shapes(const Config& config, const ModelLayout& layout) {
  const int64_t p = layout.pipeline.stages(), m = config.train.microbatches;
  std::vector<PipelineShape> shapes{{PipelineSchedule::kGPipe, p, 1, m}, {PipelineSchedule::kOneFOneB, p, 1, m}};
  if (m % p == 0)
    shapes.push_back({PipelineSchedule::kInterleaved, p, std::max<int64_t>(layout.pipeline.chunks, 2), m});
  return shapes;
}

std::string cell_text(const PipelineTimetable::Slot& slot, int64_t chunks) {
  if (!slot.busy) return ".";
  const char kind = slot.pass.kind == PipelinePass::kForward ? 'F' : 'B';
  if (chunks == 1) return fmt::format("{}{}", kind, slot.pass.microbatch);
  return fmt::format("{}{}.{}", kind, slot.pass.microbatch, slot.pass.chunk);
}

std::vector<int64_t> in_flight_per_stage(const PipelineShape& shape) {
  std::vector<int64_t> out;
  for (int64_t s = 0; s < shape.stages; ++s) out.push_back(max_in_flight(stage_passes(shape, s)));
  return out;
}

std::string shape_name(const PipelineShape& shape) {
  const std::string name = name_of(shape.schedule);
  return shape.chunks == 1 ? name : fmt::format("{} (v = {})", name, shape.chunks);
}
}  // namespace

std::string schedule_text(const Config& config, const ModelLayout& layout) {
  const PipelineShape shape = config_shape(config, layout);
  const PipelineTimetable table = pipeline_timetable(shape);
  std::string out = fmt::format("schedule: {} slots, one pass per slot (F forward, B backward; microbatch{}; . idle), "
                                "{:.1f}% idle\n",
                                table.length(), shape.chunks > 1 ? ".chunk" : "", 100.0 * table.idle_fraction());
  if (table.length() <= kMostSlotsShown) {
    std::vector<std::vector<std::string>> rows;
    for (int64_t s = 0; s < shape.stages; ++s) {
      std::vector<std::string> row{fmt::format("stage {}", s)};
      for (const auto& slot : table.slots[static_cast<size_t>(s)]) row.push_back(cell_text(slot, shape.chunks));
      rows.push_back(row);
    }
    out += text_table(rows, "l", "  ");
  } else {
    out += fmt::format("  (wider than {} slots: the timetable is in --json)\n", kMostSlotsShown);
  }
  std::vector<std::vector<std::string>> rows{{"schedule", "bubble (p-1)/(vM+p-1)", "timetable idle",
                                              "in flight per stage (microbatch-chunks)", "blocks each"}};
  for (const auto& s : compared_shapes(config, layout))
    rows.push_back({shape_name(s), fmt::format("{:.1f}%", 100.0 * bubble_fraction(s)),
                    fmt::format("{:.1f}%", 100.0 * pipeline_timetable(s).idle_fraction()),
                    fmt::format("{}", fmt::join(in_flight_per_stage(s), ", ")),
                    fmt::format("{:g}", static_cast<double>(config.model.n_layer) / static_cast<double>(s.virtual_stages()))});
  return out + "schedules compared:\n" + text_table(rows, "lrrll", "  ");
}

nlohmann::json schedule_json(const Config& config, const ModelLayout& layout) {
  const PipelineShape shape = config_shape(config, layout);
  const PipelineTimetable table = pipeline_timetable(shape);
  nlohmann::json timetable = nlohmann::json::array();
  for (const auto& row : table.slots) {
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& slot : row) cells.push_back(cell_text(slot, shape.chunks));
    timetable.push_back(cells);
  }
  nlohmann::json schedules = nlohmann::json::array();
  for (const auto& s : compared_shapes(config, layout))
    schedules.push_back({{"schedule", name_of(s.schedule)},
                         {"virtual_stages", s.chunks},
                         {"bubble_fraction", bubble_fraction(s)},
                         {"timetable_idle_fraction", pipeline_timetable(s).idle_fraction()},
                         {"in_flight_per_stage", in_flight_per_stage(s)}});
  return {{"timetable", timetable}, {"timetable_idle_fraction", table.idle_fraction()}, {"schedules", schedules}};
}

}  // namespace spmd
