// The pieces behind newcomer-facing messages: size hints that name the fix, did-you-mean over
// rule names, folding repeated block rows, byte sizes on the command line.
#include <doctest/doctest.h>

#include "config/config.h"
#include "inspect/memory_verdict.h"
#include "inspect/param_groups.h"
#include "mesh/size_hint.h"
#include "model/params.h"
#include "parallel/layout.h"
#include "test_support.h"
#include "usage_error.h"

using namespace spmd;
using spmd::test::contains;
using spmd::test::usage_error_of;

namespace {
const char* kBase = "mesh: {shape: [3, 3], axes: [data, model]}\n"
                    "sharding_rules: [[batch, data], [vocab, model], [heads, model], [mlp, model], "
                    "[embed, null], [seq, null], [kv, null]]\n"
                    "model: {n_head: 4, n_embd: 128}\ndata: {batch_size: 12}\n";
}  // namespace

TEST_CASE("size hints: heads over a 3-way axis name n_head's and the axis's working values") {
  const auto msg = usage_error_of([] { plan_layout(parse_config(kBase, "t.yaml")); });
  CHECK(contains(msg, "h.0.attn.c_attn.weight: dim 2 (logical axis 'heads', model.n_head = 4) does not divide over "
                      "mesh axis 'model' of size 3"));
  CHECK(contains(msg, "set model.n_head to 3 or 6"));
  CHECK(contains(msg, "make mesh axis 'model' 1, 2 or 4 in mesh.shape"));
  CHECK(contains(msg, "map heads to null"));
}

TEST_CASE("size hints: a derived size names its formula, values the config refuses are skipped") {
  const std::vector<SizeSource> sources = size_sources(ModelConfig{});  // n_head 4, n_embd 128
  const SizeSource* mlp = nullptr;
  for (const auto& s : sources)
    if (s.logical == "mlp") mlp = &s;
  REQUIRE(mlp != nullptr);
  // mlp = 4 x n_embd; n_embd must stay a multiple of 4: over 3 parts, 120 and 132.
  CHECK((nearest_working_values(*mlp, 3) == std::vector<int64_t>{120, 132}));
  Mesh mesh({3}, {"model"});
  const auto msg = usage_error_of([&] {
    check_dims_divide(mesh, PartitionSpec{{{"model"}}}, {512}, {"mlp"}, sources, "h.0.mlp.c_fc.bias");
  });
  CHECK(contains(msg, "size 512 = 4 x model.n_embd, model.n_embd = 128"));
  CHECK(contains(msg, "set model.n_embd to 120 or 132"));
}

TEST_CASE("rules: an unused logical name is a typo with a did-you-mean") {
  std::string yaml = kBase;
  yaml.replace(yaml.find("[embed, null]"), 13, "[embd, null]");
  yaml.replace(yaml.find("[3, 3]"), 6, "[3, 1]");
  const auto msg = usage_error_of([&] { plan_layout(parse_config(yaml, "t.yaml")); });
  CHECK(contains(msg, "sharding_rules[4] [embd, null]"));
  CHECK(contains(msg, "did you mean 'embed'"));
}

TEST_CASE("inspect: repeated blocks fold into one row, differing rows stay apart") {
  std::vector<ParamRow> rows{{"wte", {"a"}}, {"h.0.w", {"x"}}, {"h.1.w", {"x"}}, {"h.2.w", {"x"}},
                             {"h.0.b", {"y"}}, {"h.1.b", {"z"}}, {"ln_f.weight", {"c"}}};
  const auto folded = fold_repeated_blocks(rows);
  REQUIRE(folded.size() == 5);
  CHECK(folded[0].name == "wte");
  CHECK(folded[1].name == "h.{0..2}.w");
  CHECK(folded[1].count == 3);
  CHECK(folded[2].name == "h.0.b");
  CHECK(folded[3].name == "h.1.b");
  CHECK(folded[4].name == "ln_f.weight");
  const auto gaps = fold_repeated_blocks({{"h.0.w", {"x"}}, {"h.1.w", {"y"}}, {"h.2.w", {"x"}}});
  CHECK(gaps[0].name == "h.{0,2}.w");
}

TEST_CASE("inspect: --device-memory sizes") {
  CHECK(parse_byte_size("80GiB", "--device-memory") == int64_t{80} << 30);
  CHECK(parse_byte_size("16 GB", "--device-memory") == 16000000000);
  CHECK(parse_byte_size("512MiB", "--device-memory") == int64_t{512} << 20);
  CHECK(contains(usage_error_of([] { parse_byte_size("-3GiB", "--device-memory"); }), "--device-memory '-3GiB'"));
  CHECK(contains(usage_error_of([] { parse_byte_size("80 parsecs", "--device-memory"); }), "80GiB"));
}
