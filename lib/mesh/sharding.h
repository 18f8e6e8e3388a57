// PartitionSpec, NamedSharding and Flax-style logical sharding rules: sharding as a small value.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "mesh/mesh.h"

namespace spmd {

// One entry per tensor dimension: the mesh axes it is sharded over (empty = replicated,
// several = sharded over their product, first name major). Missing trailing dims are replicated.
struct PartitionSpec {
  std::vector<std::vector<std::string>> dims;

  const std::vector<std::string>& axes_of(size_t dim) const;  // empty past the end
  std::vector<std::string> used_axes() const;                 // in order of appearance
  std::string to_string() const;                              // P(None, 'model')
  bool operator==(const PartitionSpec& other) const;
};

// As JAX prints it in JSON: [null, "model", ["data", "model"]] (the index, spmd-inspect --json).
nlohmann::json spec_to_json(const PartitionSpec& spec);

// Where along one mesh axis a tensor lives at all (a pipeline stage's share of the layers): only
// ranks whose index along `axis` is one of `indices` hold it. No axis: every rank holds it.
struct Placement {
  std::string axis;
  std::vector<int64_t> indices;  // ascending; the first holds the primary replica
  bool everywhere() const { return axis.empty(); }
};

// A mesh and a spec applied to one tensor of a given global shape (and, optionally, placed on
// some indices of one mesh axis).
class NamedSharding {
 public:
  // Validates the spec against the mesh and shape; errors name `tensor_name`, the dim and sizes.
  NamedSharding(const Mesh& mesh, PartitionSpec spec, std::vector<int64_t> global_shape,
                std::string tensor_name, Placement placement = {});

  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& spec() const { return spec_; }
  const std::vector<int64_t>& global_shape() const { return global_shape_; }
  const std::string& tensor_name() const { return tensor_name_; }
  const Placement& placement() const { return placement_; }
  bool holds(int64_t rank) const;  // false off the placement's indices

  std::vector<int64_t> shard_shape() const;               // the same on every rank
  std::vector<int64_t> shard_offset(int64_t rank) const;  // global index of the block's start
  int64_t shard_numel() const;
  int64_t num_shards(size_t dim) const;                   // product of the dim's axes
  // Mesh axes neither the spec nor the placement uses: ranks differing only along them hold the
  // same block.
  std::vector<std::string> replicated_axes() const;
  // Groups of ranks holding the same block (holders only), ordered by block (row-major).
  std::vector<std::vector<int64_t>> replica_groups() const;
  // True for exactly one rank per distinct block (coordinate 0 on every replicated axis, the
  // placement's first index).
  bool is_primary_replica(int64_t rank) const;

 private:
  Mesh mesh_;  // a copy: a few small vectors
  PartitionSpec spec_;
  std::vector<int64_t> global_shape_;
  std::string tensor_name_;
  Placement placement_;
};

// One Flax-style logical rule: logical name -> mesh axes (empty = null, replicated).
struct ShardingRule {
  std::string logical;
  std::vector<std::string> mesh_axes;
};

// Ordered Flax rules: logical name -> mesh axes.
class LogicalRules {
 public:
  // Validates that every rule's mesh axes exist on `mesh` and are not repeated within a rule.
  LogicalRules(std::vector<ShardingRule> rules, const Mesh& mesh);

  // Flax's algorithm: rules in order; a rule applies to a dim when that dim is still
  // unassigned and none of its mesh axes is used yet in this spec; the rest is replicated.
  // "" names a dimension that is never sharded. A name no rule mentions is an error.
  PartitionSpec resolve(const std::vector<std::string>& logical_axes,
                        const std::string& tensor_name) const;
  std::vector<std::string> known_names() const;
  const std::vector<ShardingRule>& rules() const { return rules_; }

 private:
  std::vector<ShardingRule> rules_;
};

}  // namespace spmd
