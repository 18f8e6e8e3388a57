// The rates the planner's cost model runs on: how fast one device multiplies matrices and moves
// memory, and each mesh axis's collective latency and bandwidth. They come from a JSON file that
// `spmd-inspect --calibrate` measures on this machine, or that a user writes for a cluster they
// are not on (docs/planner.md shows both); no rate is a constant in the code.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace spmd {

// One collective link: the alpha-beta model t = latency + bytes_on_the_wire / bandwidth, with a
// ring's bytes on the wire (an all-reduce of S over n moves 2 (n-1)/n S; a gather (n-1)/n S).
struct LinkRate {
  double latency_s = 0;
  double bytes_per_s = 0;
};

struct MachineRates {
  double matmul_flops_per_s = 0;  // one device's fp32 matmul rate while every device works
  double memory_bytes_per_s = 0;  // one device's elementwise traffic (read + write) rate
  // One device's rate through attention computed op by op, forward and backward (scores, mask,
  // softmax, times V: the context-parallel paths, where one process runs a fused kernel), FLOPs of
  // its products.
  // 0: as matmul_flops_per_s (a file written by hand).
  double attention_flops_per_s = 0;
  // Links by mesh axis name (a cluster's: intra-node model axis, inter-node data axis), and
  // by group size (what --calibrate measures here: every group of that size busy at once).
  std::map<std::string, LinkRate> axes;
  std::map<int64_t, LinkRate> group_sizes;
  // The same groups' all-gathers and reduce-scatters, fitted to the ring formula for them
  // (calibration; Gloo's run well below its all-reduce rate): context parallelism's and FSDP's
  // collectives. Empty (a file written by hand): the links above serve them too.
  std::map<int64_t, LinkRate> gather_group_sizes;
  int64_t devices = 0;            // the device count it was measured with (0: written by hand)
  // How much faster one device multiplies while the others idle: about devices / cores where CPU
  // ranks share cores (a rank idle in a pipeline's bubble lends its core), 1 on accelerators.
  double lone_speedup = 1;
  std::string source;             // the file it came from, for messages

  // The link a group over `axes` of `group_size` devices uses: the slowest named axis if the
  // file names them all, else the measured group of that size (or the nearest larger one).
  // UsageError naming the file and the axis when it has neither.
  LinkRate link(const std::vector<std::string>& axes, int64_t group_size) const;
  // The link for all-gathers and reduce-scatters: as link(), but a group the file does not name by
  // axis uses gather_group_sizes where it has one.
  LinkRate gather_link(const std::vector<std::string>& axes, int64_t group_size) const;

 private:
  bool names_all(const std::vector<std::string>& names) const;  // every one of them under `axes`
};

// Reads and checks a rates file; UsageError naming the file and the key when it is malformed.
MachineRates read_machine_rates(const std::string& path);
nlohmann::json machine_rates_json(const MachineRates& rates);

}  // namespace spmd
