// Text pictures of a mesh and of how one array's blocks are spread over it.
#pragma once
#include <string>

#include "mesh/mesh.h"
#include "mesh/sharding.h"

namespace spmd {

// The mesh as a grid of rank ids: rows = first axis, columns = the remaining axes (row-major).
std::string render_mesh(const Mesh& mesh);

// jax.debug.visualize_array_sharding for a 1-D or 2-D array: one cell per block, naming the
// ranks that hold it and the index range it covers.
std::string render_sharding(const NamedSharding& sharding);

// "1.5 MiB"
std::string human_bytes(int64_t bytes);

}  // namespace spmd
