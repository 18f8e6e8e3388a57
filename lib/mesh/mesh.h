// A named device mesh: ranks laid out row-major over named axes (as np.array(devices).reshape).
// Knows nothing about models; only coordinates, axes and the groups of ranks along axes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spmd {

// The most devices (processes) a mesh may have. Far above any real run; it keeps sizes computed
// from a mesh (products of axis sizes, ranks, padded dims) well inside int64 and makes a mistyped
// size an error instead of an hours-long loop over ranks.
constexpr int64_t kMaxMeshDevices = int64_t{1} << 20;

class Mesh {
 public:
  // Validates: equal lengths, sizes >= 1, unique non-empty names, at most kMaxMeshDevices devices.
  // Throws UsageError.
  Mesh(std::vector<int64_t> shape, std::vector<std::string> axes);

  int64_t size() const { return size_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& axes() const { return axes_; }
  bool has_axis(const std::string& name) const;
  int64_t axis_index(const std::string& name) const;  // throws, listing the mesh's axes
  int64_t axis_size(const std::string& name) const;
  int64_t axes_size(const std::vector<std::string>& names) const;  // product; 1 for none

  std::vector<int64_t> coords(int64_t rank) const;
  int64_t rank_at(const std::vector<int64_t>& coords) const;

  // Index of `rank` along `names` taken together, first name major (the shard index of a
  // dimension sharded over `names`).
  int64_t index_along(int64_t rank, const std::vector<std::string>& names) const;
  // The ranks that differ from `rank` only along `names`, ordered by index_along.
  std::vector<int64_t> group_ranks(int64_t rank, const std::vector<std::string>& names) const;
  // All distinct groups along `names` (each as group_ranks would return it), in rank order.
  std::vector<std::vector<int64_t>> all_groups(const std::vector<std::string>& names) const;

  std::string describe() const;  // "[4, 2] (data, model)"

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> axes_;
  int64_t size_ = 1;
};

}  // namespace spmd
