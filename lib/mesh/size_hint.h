// Messages that name the fix when a tensor dim does not divide over its mesh axes. The mesh knows
// no model: where a logical axis's size comes from (a config key) arrives as data, SizeSource.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "mesh/sharding.h"

namespace spmd {

// The config key behind a logical axis's size: the size is size_of(value); size_of returns -1 for
// values the config would refuse (e.g. n_head not dividing n_embd).
struct SizeSource {
  std::string logical;  // heads
  std::string key;      // model.n_head
  std::string formula;  // how the size follows from the key: "model.n_head", "4 x model.n_embd"
  int64_t value = 0;    // the key's current value
  std::function<int64_t(int64_t)> size_of;
  std::string note;     // a constraint the new value must keep: "model.n_embd must stay a multiple of it"
};

// Values of `source.key` nearest to its current one whose size divides by `parts` (up to one below
// and one above; fewer when none exists nearby).
std::vector<int64_t> nearest_working_values(const SizeSource& source, int64_t parts);

// Throws UsageError when a dim of `shape` does not divide by its mesh axes, naming the tensor, the
// logical axis, the config key behind the size, the mesh axes and their sizes, and the nearest
// settings of each that work. Dims without a source fall back to the sizes alone.
void check_dims_divide(const Mesh& mesh, const PartitionSpec& spec, const std::vector<int64_t>& shape,
                       const std::vector<std::string>& logical, const std::vector<SizeSource>& sources,
                       const std::string& tensor_name);

}  // namespace spmd
