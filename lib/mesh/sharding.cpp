// PartitionSpec / NamedSharding / LogicalRules: validation, shard geometry, rule resolution.
#include "mesh/sharding.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "util/did_you_mean.h"
#include "util/error.h"

namespace spmd {

namespace {
const std::vector<std::string> kNoAxes;

std::string quote_axes(const std::vector<std::string>& axes) {
  if (axes.empty()) return "None";
  std::vector<std::string> quoted;
  for (const auto& a : axes) quoted.push_back("'" + a + "'");
  if (axes.size() == 1) return quoted[0];
  return fmt::format("({})", fmt::join(quoted, ", "));
}
}  // namespace

// ---------------------------------------------------------------------------- PartitionSpec

const std::vector<std::string>& PartitionSpec::axes_of(size_t dim) const {
  return dim < dims.size() ? dims[dim] : kNoAxes;
}

std::vector<std::string> PartitionSpec::used_axes() const {
  std::vector<std::string> used;
  for (const auto& d : dims) used.insert(used.end(), d.begin(), d.end());
  return used;
}

std::string PartitionSpec::to_string() const {
  std::vector<std::string> parts;
  for (const auto& d : dims) parts.push_back(quote_axes(d));
  return fmt::format("P({})", fmt::join(parts, ", "));
}

nlohmann::json spec_to_json(const PartitionSpec& spec) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& axes : spec.dims) {
    if (axes.empty()) out.push_back(nullptr);
    else if (axes.size() == 1) out.push_back(axes[0]);
    else out.push_back(axes);
  }
  return out;
}

bool PartitionSpec::operator==(const PartitionSpec& other) const {
  size_t n = std::max(dims.size(), other.dims.size());
  for (size_t i = 0; i < n; ++i)
    if (axes_of(i) != other.axes_of(i)) return false;
  return true;
}

// ---------------------------------------------------------------------------- NamedSharding

NamedSharding::NamedSharding(const Mesh& mesh, PartitionSpec spec, std::vector<int64_t> global_shape,
                             std::string tensor_name, Placement placement)
    : mesh_(mesh), spec_(std::move(spec)), global_shape_(std::move(global_shape)),
      tensor_name_(std::move(tensor_name)), placement_(std::move(placement)) {
  if (!placement_.everywhere()) {
    const auto used = spec_.used_axes();
    SPMD_CHECK(std::find(used.begin(), used.end(), placement_.axis) == used.end(),
               "{}: mesh axis '{}' holds the pipeline stages and cannot also shard the tensor's dims ({}); map "
               "its logical axes to other mesh axes",
               tensor_name_, placement_.axis, spec_.to_string());
    SPMD_CHECK(!placement_.indices.empty() && std::is_sorted(placement_.indices.begin(), placement_.indices.end()),
               "{}: placement on '{}' needs ascending indices", tensor_name_, placement_.axis);
    for (int64_t i : placement_.indices)
      SPMD_CHECK(i >= 0 && i < mesh.axis_size(placement_.axis), "{}: placement index {} is outside mesh axis '{}' of size {}",
                 tensor_name_, i, placement_.axis, mesh.axis_size(placement_.axis));
  }
  SPMD_CHECK(spec_.dims.size() <= global_shape_.size(),
             "{}: PartitionSpec {} has {} entries but the tensor has rank {} (shape {}); "
             "it needs at most {} entries",
             tensor_name_, spec_.to_string(), spec_.dims.size(), global_shape_.size(),
             global_shape_, global_shape_.size());
  std::set<std::string> used;
  for (size_t d = 0; d < spec_.dims.size(); ++d) {
    for (const auto& axis : spec_.dims[d]) {
      SPMD_CHECK(mesh.has_axis(axis), "{}: dim {} of {} names mesh axis '{}', but the mesh's axes are {}",
                 tensor_name_, d, spec_.to_string(), axis, mesh.axes());
      SPMD_CHECK(used.insert(axis).second,
                 "{}: mesh axis '{}' appears more than once in {}; an axis may shard one dim only",
                 tensor_name_, axis, spec_.to_string());
    }
    int64_t parts = mesh.axes_size(spec_.dims[d]);
    int64_t size = global_shape_[d];
    if (size % parts != 0) {
      int64_t below = (size / parts) * parts;
      int64_t above = below + parts;
      throw UsageError(fmt::format(
          "{}: dim {} of size {} is not divisible by {} = size of mesh axes {} (spec {}); "
          "nearest sizes that divide: {}{}",
          tensor_name_, d, size, parts, spec_.dims[d], spec_.to_string(),
          below > 0 ? fmt::format("{} or ", below) : std::string(), above));
    }
  }
}

int64_t NamedSharding::num_shards(size_t dim) const { return mesh_.axes_size(spec_.axes_of(dim)); }

std::vector<int64_t> NamedSharding::shard_shape() const {
  std::vector<int64_t> shape = global_shape_;
  for (size_t d = 0; d < shape.size(); ++d) shape[d] /= num_shards(d);
  return shape;
}

int64_t NamedSharding::shard_numel() const {
  int64_t n = 1;
  for (int64_t s : shard_shape()) n *= s;
  return n;
}

std::vector<int64_t> NamedSharding::shard_offset(int64_t rank) const {
  auto shape = shard_shape();
  std::vector<int64_t> offset(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d)
    offset[d] = mesh_.index_along(rank, spec_.axes_of(d)) * shape[d];
  return offset;
}

bool NamedSharding::holds(int64_t rank) const {
  if (placement_.everywhere()) return true;
  const int64_t at = mesh_.index_along(rank, {placement_.axis});
  return std::find(placement_.indices.begin(), placement_.indices.end(), at) != placement_.indices.end();
}

std::vector<std::string> NamedSharding::replicated_axes() const {
  auto used = spec_.used_axes();
  if (!placement_.everywhere()) used.push_back(placement_.axis);
  std::vector<std::string> rest;
  for (const auto& a : mesh_.axes())
    if (std::find(used.begin(), used.end(), a) == used.end()) rest.push_back(a);
  return rest;
}

std::vector<std::vector<int64_t>> NamedSharding::replica_groups() const {
  auto along = replicated_axes();
  if (!placement_.everywhere()) along.push_back(placement_.axis);
  auto groups = mesh_.all_groups(along);
  for (auto& g : groups) g.erase(std::remove_if(g.begin(), g.end(), [&](int64_t r) { return !holds(r); }), g.end());
  // Order by block: the block's offsets, row-major.
  std::sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    return shard_offset(a[0]) < shard_offset(b[0]);
  });
  return groups;
}

bool NamedSharding::is_primary_replica(int64_t rank) const {
  if (!placement_.everywhere() && mesh_.index_along(rank, {placement_.axis}) != placement_.indices.front()) return false;
  return mesh_.index_along(rank, replicated_axes()) == 0;
}

// ---------------------------------------------------------------------------- LogicalRules

LogicalRules::LogicalRules(std::vector<ShardingRule> rules, const Mesh& mesh) : rules_(std::move(rules)) {
  for (size_t i = 0; i < rules_.size(); ++i) {
    std::set<std::string> seen;
    for (const auto& axis : rules_[i].mesh_axes) {
      SPMD_CHECK(mesh.has_axis(axis),
                 "sharding_rules[{}] ('{}' -> {}) names mesh axis '{}'{}, but the mesh's axes are {} (mesh.axes)",
                 i, rules_[i].logical, quote_axes(rules_[i].mesh_axes), axis, did_you_mean(axis, mesh.axes()),
                 mesh.axes());
      SPMD_CHECK(seen.insert(axis).second, "sharding_rules[{}] ('{}') repeats mesh axis '{}'", i,
                 rules_[i].logical, axis);
    }
  }
}

std::vector<std::string> LogicalRules::known_names() const {
  std::vector<std::string> names;
  std::set<std::string> seen;  // not a scan of `names`: thousands of rules must stay cheap
  for (const auto& r : rules_)
    if (seen.insert(r.logical).second) names.push_back(r.logical);
  return names;
}

PartitionSpec LogicalRules::resolve(const std::vector<std::string>& logical_axes,
                                    const std::string& tensor_name) const {
  for (size_t d = 0; d < logical_axes.size(); ++d) {
    const auto& name = logical_axes[d];
    auto names_it = [&](const ShardingRule& r) { return r.logical == name; };
    SPMD_CHECK(name.empty() || std::any_of(rules_.begin(), rules_.end(), names_it),
               "{}: dim {} has logical axis '{}', which no sharding rule mentions; known logical "
               "names: [{}] (add a rule such as [{}, null] to replicate it)",
               tensor_name, d, name, fmt::join(known_names(), ", "), name);
  }
  std::vector<bool> assigned(logical_axes.size(), false);
  PartitionSpec spec;
  spec.dims.resize(logical_axes.size());
  std::set<std::string> used;
  for (const auto& rule : rules_) {
    auto pos = std::find(logical_axes.begin(), logical_axes.end(), rule.logical);
    if (pos == logical_axes.end()) continue;
    size_t d = pos - logical_axes.begin();
    bool free = std::none_of(rule.mesh_axes.begin(), rule.mesh_axes.end(),
                             [&](const std::string& a) { return used.count(a) > 0; });
    if (assigned[d] || !free) continue;
    assigned[d] = true;
    spec.dims[d] = rule.mesh_axes;
    used.insert(rule.mesh_axes.begin(), rule.mesh_axes.end());
  }
  return spec;
}

}  // namespace spmd
