// A census summary as text tables (by op kind, by region, host syncs, what backward holds, the
// logits' passes), as JSON for programs, and its last line, which scripts read.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "census/census_summary.h"

namespace spmd::census {

// The tables, then census_line(), on stdout.
void print_census(const CensusSummary& sum);
// "census: <GB> GB outside products, <TFLOP> TFLOP in products, <N> launches, <ms> ms on <GPU> (<MFU> % MFU)"
std::string census_line(const CensusSummary& sum);
nlohmann::json census_json(const CensusSummary& sum);

}  // namespace spmd::census
