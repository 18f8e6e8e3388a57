// spmd-inspect's view of a pipeline schedule: the timetable (which stage runs which microbatch and
// chunk in each slot), and every schedule's bubble and activations in flight side by side.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "parallel/layout.h"

namespace spmd {

// The config's timetable, one row per stage ("F3" forward of microbatch 3, "B3.1" backward of
// microbatch 3 on chunk 1, "." idle), then the comparison of gpipe, 1f1b and interleaved.
std::string schedule_text(const Config& config, const ModelLayout& layout);

// {"timetable": [[cell per slot] per stage], "timetable_idle_fraction",
//  "schedules": [{"schedule", "virtual_stages", "bubble_fraction", "timetable_idle_fraction",
//                 "in_flight_per_stage"}]}; a schedule the config's microbatches cannot run is left out.
nlohmann::json schedule_json(const Config& config, const ModelLayout& layout);

}  // namespace spmd
