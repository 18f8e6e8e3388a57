// The planner's calibration probe: measures this machine's rates with every device busy at once,
// as in training: each device's matmul rate at the model's MLP shape, its elementwise memory rate,
// attention's rate, and all-reduce and all-gather latency and bandwidth for every group size the
// device count factors into (N = 8: groups of 2, 4 and 8). `spmd-inspect --calibrate` runs it
// (commands/calibrate_command.h).
#pragma once
#include <cstdint>

#include "comm/communicator.h"
#include "config/config.h"
#include "mesh/mesh.h"
#include "plan/machine_rates.h"

namespace spmd {

// Latency and bandwidth from two timings of a collective that moves `small` and `large` bytes over
// the wire, fitted to t = latency + bytes / bandwidth (latency clamped at 0).
LinkRate fit_link(double small, double t_small, double large, double t_large);

// Axes p0, p1, ... of the prime factors of `devices`, whose trailing axes give every group size.
Mesh probe_mesh(int64_t devices);

// Collective over `comm` (built on probe_mesh): the rates, the same on every rank.
MachineRates measure_machine_rates(const Config& config, Communicator& comm);

}  // namespace spmd
