// Mesh, PartitionSpec, NamedSharding and logical rules, including the seeds' examples.
#include <doctest/doctest.h>

#include <string>

#include "mesh/mesh.h"
#include "mesh/render.h"
#include "mesh/sharding.h"
#include "usage_error.h"
#include "test_support.h"
#include "util/error.h"

using namespace spmd;
using spmd::test::contains;
using spmd::test::usage_error_of;

TEST_CASE("mesh: row-major coordinates and axis groups") {
  Mesh mesh({2, 4}, {"data", "model"});
  CHECK(mesh.size() == 8);
  CHECK(mesh.coords(5) == std::vector<int64_t>{1, 1});
  CHECK(mesh.rank_at({1, 3}) == 7);
  CHECK(mesh.group_ranks(5, {"model"}) == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(mesh.group_ranks(5, {"data"}) == std::vector<int64_t>{1, 5});
  CHECK(mesh.group_ranks(5, {"data", "model"}) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(mesh.group_ranks(5, {"model", "data"}) == std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7});
  CHECK(mesh.group_ranks(5, {}) == std::vector<int64_t>{5});
  CHECK(mesh.index_along(6, {"data", "model"}) == 6);
  CHECK(mesh.all_groups({"data"}).size() == 4);
}

TEST_CASE("mesh: three axes and size-1 axes") {
  Mesh mesh({2, 2, 2}, {"data", "fsdp", "model"});
  CHECK(mesh.coords(6) == std::vector<int64_t>{1, 1, 0});
  CHECK(mesh.group_ranks(3, {"data", "fsdp"}) == std::vector<int64_t>{1, 3, 5, 7});
  Mesh ones({8, 1}, {"data", "model"});
  CHECK(ones.group_ranks(3, {"model"}) == std::vector<int64_t>{3});
}

TEST_CASE("mesh: validation errors name the culprit") {
  CHECK(contains(usage_error_of([] { Mesh({2, 4}, {"data"}); }), "mesh.axes has 1"));
  CHECK(contains(usage_error_of([] { Mesh({2, 2}, {"data", "data"}); }), "'data' twice"));
  CHECK(contains(usage_error_of([] { Mesh({2, 0}, {"data", "model"}); }), "axis 'model'"));
  CHECK(contains(usage_error_of([] { Mesh({2, 2}, {"data", ""}); }), "empty name"));
  Mesh mesh({2, 4}, {"data", "model"});
  CHECK(contains(usage_error_of([&] { mesh.axis_index("tensor"); }), "unknown mesh axis 'tensor'"));
}

TEST_CASE("sharding: the seeds' 2x4 example: (None, 'model') on a 1024x1024 kernel") {
  Mesh mesh({2, 4}, {"data", "model"});
  NamedSharding s(mesh, PartitionSpec{{{}, {"model"}}}, {1024, 1024}, "kernel");
  CHECK(s.shard_shape() == std::vector<int64_t>{1024, 256});
  CHECK(s.shard_offset(0) == std::vector<int64_t>{0, 0});
  CHECK(s.shard_offset(6) == std::vector<int64_t>{0, 512});
  auto groups = s.replica_groups();
  REQUIRE(groups.size() == 4);
  CHECK(groups[0] == std::vector<int64_t>{0, 4});
  CHECK(groups[1] == std::vector<int64_t>{1, 5});
  CHECK(groups[2] == std::vector<int64_t>{2, 6});
  CHECK(groups[3] == std::vector<int64_t>{3, 7});
  CHECK(s.is_primary_replica(1));
  CHECK_FALSE(s.is_primary_replica(5));
}

TEST_CASE("sharding: a dim over two axes, first name major, missing trailing dims replicated") {
  Mesh mesh({2, 4}, {"data", "model"});
  NamedSharding s(mesh, PartitionSpec{{{"model", "data"}}}, {16, 3}, "w");
  CHECK(s.shard_shape() == std::vector<int64_t>{2, 3});
  // rank 5 = (data 1, model 1): index along (model, data) = 1*2 + 1 = 3
  CHECK(s.shard_offset(5) == std::vector<int64_t>{6, 0});
  CHECK(s.replica_groups().size() == 8);
  CHECK(s.spec().to_string() == "P(('model', 'data'))");
}

TEST_CASE("sharding: validation errors name tensor, dim and sizes") {
  Mesh mesh({2, 4}, {"data", "model"});
  auto indivisible = usage_error_of([&] { NamedSharding(mesh, PartitionSpec{{{}, {"model"}}}, {8, 10}, "h.0.w"); });
  CHECK(contains(indivisible, "h.0.w"));
  CHECK(contains(indivisible, "dim 1 of size 10"));
  CHECK(contains(indivisible, "divisible by 4"));
  CHECK(contains(indivisible, "8 or 12"));
  auto twice = usage_error_of([&] { NamedSharding(mesh, PartitionSpec{{{"model"}, {"model"}}}, {8, 8}, "w"); });
  CHECK(contains(twice, "'model' appears more than once"));
  auto unknown = usage_error_of([&] { NamedSharding(mesh, PartitionSpec{{{"tensor"}}}, {8}, "w"); });
  CHECK(contains(unknown, "mesh axis 'tensor'"));
  auto rank = usage_error_of([&] { NamedSharding(mesh, PartitionSpec{{{}, {}, {}}}, {8, 8}, "w"); });
  CHECK(contains(rank, "rank 2"));
}

TEST_CASE("rules: the seeds' logical example ('embed','hidden') -> (None,'model')") {
  Mesh mesh({2, 4}, {"data", "model"});
  LogicalRules rules({{"batch", {"data"}}, {"hidden", {"model"}}, {"embed", {}}}, mesh);
  CHECK(rules.resolve({"embed", "hidden"}, "kernel") == PartitionSpec{{{}, {"model"}}});
}

TEST_CASE("rules: Flax priority: first applicable rule wins, axes used once") {
  Mesh mesh({2, 4}, {"data", "model"});
  // batch takes 'data' first, so embed's rule to 'data' cannot apply: embed falls to its next rule.
  LogicalRules rules({{"batch", {"data"}}, {"embed", {"data"}}, {"embed", {"model"}}, {"seq", {}}}, mesh);
  CHECK(rules.resolve({"batch", "seq", "embed"}, "x") == PartitionSpec{{{"data"}, {}, {"model"}}});
  CHECK(rules.resolve({"embed"}, "y") == PartitionSpec{{{"data"}}});
  // Unnamed dims are replicated.
  CHECK(rules.resolve({"", "embed"}, "z") == PartitionSpec{{{}, {"data"}}});
}

TEST_CASE("rules: unknown logical name and unknown mesh axis are errors listing what is known") {
  Mesh mesh({2, 4}, {"data", "model"});
  LogicalRules rules({{"batch", {"data"}}, {"embed", {}}}, mesh);
  auto err = usage_error_of([&] { rules.resolve({"embed", "hiden"}, "h.0.mlp"); });
  CHECK(contains(err, "h.0.mlp"));
  CHECK(contains(err, "'hiden'"));
  CHECK(contains(err, "batch, embed"));
  auto bad_axis = usage_error_of([&] { LogicalRules({{"batch", {"dp"}}}, mesh); });
  CHECK(contains(bad_axis, "sharding_rules[0]"));
  CHECK(contains(bad_axis, "'dp'"));
}

TEST_CASE("render: mesh grid and block picture") {
  Mesh mesh({2, 4}, {"data", "model"});
  auto grid = render_mesh(mesh);
  CHECK(contains(grid, "model=3"));
  CHECK(contains(grid, "data=1"));
  NamedSharding s(mesh, PartitionSpec{{{}, {"model"}}}, {1024, 1024}, "kernel");
  auto picture = render_sharding(s);
  CHECK(contains(picture, "rank 0,4"));
  CHECK(contains(picture, "rank 3,7"));
  CHECK(contains(picture, "[0:1024][768:1024]"));
}
