// `spmd-inspect --data-order --steps A:B`: the samples training steps A..B read (1-based,
// inclusive), one line each: step, row of the global batch, source name, and the sample's index
// in that source's own order. A blend can be audited before it costs a GPU.
#pragma once
#include <cstdint>
#include <string>

#include "config/config.h"

namespace spmd {

struct StepRange {
  int64_t first = 1, last = 1;  // 1-based, inclusive
};

// "A:B" (1 <= A <= B) or "A" (one step); UsageError naming --steps otherwise.
StepRange parse_step_range(const std::string& text);

// Prints the lines (JSON Lines with keys step, row, source, index when `json`). A single
// data.train is the source "train".
void print_data_order(const Config& config, const StepRange& steps, bool json);

}  // namespace spmd
