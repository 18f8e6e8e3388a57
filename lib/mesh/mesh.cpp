// Mesh coordinates and axis groups.
#include "mesh/mesh.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd {

Mesh::Mesh(std::vector<int64_t> shape, std::vector<std::string> axes)
    : shape_(std::move(shape)), axes_(std::move(axes)) {
  SPMD_CHECK(!shape_.empty(), "mesh.shape must have at least one axis");
  SPMD_CHECK(shape_.size() == axes_.size(),
             "mesh.shape has {} entries {} but mesh.axes has {} names {}", shape_.size(),
             shape_, axes_.size(), axes_);
  std::set<std::string> seen;
  for (size_t i = 0; i < axes_.size(); ++i) {
    SPMD_CHECK(!axes_[i].empty(), "mesh.axes[{}] is an empty name", i);
    SPMD_CHECK(seen.insert(axes_[i]).second, "mesh.axes names '{}' twice: {}", axes_[i], axes_);
    SPMD_CHECK(shape_[i] >= 1, "mesh.shape[{}] (axis '{}') is {}; sizes must be >= 1", i,
               axes_[i], shape_[i]);
    SPMD_CHECK(shape_[i] <= kMaxMeshDevices / size_,  // size_ * shape_[i] without overflowing
               "mesh.shape {} has more than {} devices in all", shape_, kMaxMeshDevices);
    size_ *= shape_[i];
  }
}

bool Mesh::has_axis(const std::string& name) const {
  return std::find(axes_.begin(), axes_.end(), name) != axes_.end();
}

int64_t Mesh::axis_index(const std::string& name) const {
  auto it = std::find(axes_.begin(), axes_.end(), name);
  SPMD_CHECK(it != axes_.end(), "unknown mesh axis '{}'; the mesh's axes are {}", name, axes_);
  return it - axes_.begin();
}

int64_t Mesh::axis_size(const std::string& name) const { return shape_[axis_index(name)]; }

int64_t Mesh::axes_size(const std::vector<std::string>& names) const {
  int64_t product = 1;
  for (const auto& n : names) product *= axis_size(n);
  return product;
}

std::vector<int64_t> Mesh::coords(int64_t rank) const {
  SPMD_ASSERT(rank >= 0 && rank < size_, "rank {} outside mesh of size {}", rank, size_);
  std::vector<int64_t> c(shape_.size());
  for (int64_t i = ndim() - 1; i >= 0; --i) {
    c[i] = rank % shape_[i];
    rank /= shape_[i];
  }
  return c;
}

int64_t Mesh::rank_at(const std::vector<int64_t>& c) const {
  int64_t rank = 0;
  for (size_t i = 0; i < shape_.size(); ++i) rank = rank * shape_[i] + c[i];
  return rank;
}

int64_t Mesh::index_along(int64_t rank, const std::vector<std::string>& names) const {
  auto c = coords(rank);
  int64_t index = 0;
  for (const auto& n : names) {
    int64_t a = axis_index(n);
    index = index * shape_[a] + c[a];
  }
  return index;
}

std::vector<int64_t> Mesh::group_ranks(int64_t rank, const std::vector<std::string>& names) const {
  auto base = coords(rank);
  int64_t count = axes_size(names);
  std::vector<int64_t> ranks;
  for (int64_t index = 0; index < count; ++index) {
    auto c = base;
    int64_t rest = index;
    for (int64_t k = static_cast<int64_t>(names.size()) - 1; k >= 0; --k) {
      int64_t a = axis_index(names[k]);
      c[a] = rest % shape_[a];
      rest /= shape_[a];
    }
    ranks.push_back(rank_at(c));
  }
  return ranks;
}

std::vector<std::vector<int64_t>> Mesh::all_groups(const std::vector<std::string>& names) const {
  std::vector<std::vector<int64_t>> groups;
  std::set<int64_t> covered;
  for (int64_t r = 0; r < size_; ++r) {
    if (covered.count(r)) continue;
    auto g = group_ranks(r, names);
    covered.insert(g.begin(), g.end());
    groups.push_back(std::move(g));
  }
  return groups;
}

std::string Mesh::describe() const {
  return fmt::format("[{}] ({})", fmt::join(shape_, ", "), fmt::join(axes_, ", "));
}

}  // namespace spmd
