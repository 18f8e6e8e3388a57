// A census log summed up: per op kind and per region, the step's totals and its roofline on a
// GPU, host syncs, what backward holds by dtype, and the passes over each chunk of logits.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "census/op_census.h"
#include "census/roofline.h"

namespace spmd::census {

struct KindRow {
  std::string name;
  int64_t calls = 0;
  std::set<std::string> dtypes;  // of the tensors it read and wrote
  double flops = 0;
  int64_t bytes_read = 0, bytes_written = 0;
  bool product = false;
  Roofline time;
};

struct RegionRow {
  std::string name;
  int64_t launches = 0;
  double flops = 0;
  int64_t bytes_outside = 0;  // read + written by the launches outside products
  Roofline time;
};

// Distinct tensors of one kind: same op (or region), dtype and shape.
struct ShapeCount {
  std::string where;  // the op that made it, or the region
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t count = 0, bytes = 0;
};

// Passes over the logits: launches in the head region touching a (rows, width) tensor (or its
// (width, rows) transpose) whose rows are those of a chunk the head's forward products wrote, per
// such chunk.
struct LogitPasses {
  int64_t width = 0;     // the vocabulary (this rank's columns)
  int64_t chunks = 0;    // forward products in the head writing (rows, width)
  int64_t launches = 0;  // launches in the head touching a chunk's logits (forward and backward)
  double per_chunk() const { return chunks > 0 ? static_cast<double>(launches) / static_cast<double>(chunks) : 0; }
};

struct CensusSummary {
  GpuSpec gpu;
  int64_t launches = 0;
  double product_flops = 0;
  int64_t bytes_outside = 0;
  Roofline estimate;
  double mfu = 0;
  std::vector<KindRow> kinds;      // the most estimated time first
  std::vector<RegionRow> regions;  // in order of first launch, "other" and "optimizer" last
  std::map<std::string, int64_t> host_syncs;
  std::map<std::string, int64_t> saved_bytes_by_dtype;
  std::vector<ShapeCount> saved;          // by region ("blocks" for every block.N), dtype and shape
  std::vector<ShapeCount> block_outputs;  // the blocks' forward launches' outputs, by op, dtype and shape
  LogitPasses logits;
  bool backward_ran = false;
  int64_t off_thread_ops = 0;
};

// `logits_width`: the vocabulary columns of the head's logits; 0 takes the widest output of the
// head's forward products.
CensusSummary summarize(const CensusLog& log, const GpuSpec& gpu, int64_t logits_width);

}  // namespace spmd::census
