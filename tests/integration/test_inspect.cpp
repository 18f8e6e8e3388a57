// spmd-inspect run as a real process: every shipped config, JSON totals, broken configs.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_support.h"

using namespace spmd::test;

namespace {
ProcessResult inspect(const std::vector<std::string>& args) {
  std::vector<std::string> argv{binary_path("spmd-inspect")};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 60);
}

nlohmann::json inspect_json(const std::string& config) {
  auto r = inspect({"--config", source_path("configs/" + config), "--json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return nlohmann::json::parse(r.output);
}
}  // namespace

TEST_CASE("inspect: every shipped config runs, in text and JSON") {
  for (const auto& entry : std::filesystem::directory_iterator(source_path("configs"))) {
    if (entry.path().extension() != ".yaml") continue;
    CAPTURE(entry.path().string());
    auto text = inspect({"--config", entry.path().string()});
    CHECK_MESSAGE(text.exit_code == 0, text.output);
    CHECK(text.output.find("memory per device") != std::string::npos);
    auto json = inspect({"--config", entry.path().string(), "--json"});
    CHECK(json.exit_code == 0);
    CHECK_NOTHROW((void)nlohmann::json::parse(json.output));
  }
}

TEST_CASE("inspect: per-device parameter bytes fall as the mesh shards more") {
  auto dp = inspect_json("dp-8x1.yaml");
  auto hybrid42 = inspect_json("hybrid-4x2.yaml");
  auto hybrid24 = inspect_json("hybrid-2x4.yaml");
  auto tp = inspect_json("tp-1x8.yaml");
  auto fsdp = inspect_json("fsdp-8.yaml");
  auto bytes = [](const nlohmann::json& j) { return j["totals"]["param_bytes_per_device"].get<double>(); };
  double global = dp["totals"]["param_bytes_global"].get<double>();
  CHECK(bytes(dp) == doctest::Approx(global));  // pure DP replicates everything
  CHECK(bytes(hybrid42) < bytes(dp));
  CHECK(bytes(hybrid24) < bytes(hybrid42));
  CHECK(bytes(tp) < bytes(hybrid24));
  // FSDP-8 holds about 1/8 of the parameters per device (+ unsharded position-free leftovers).
  CHECK(bytes(fsdp) / global == doctest::Approx(1.0 / 8).epsilon(0.05));
  // JSON shape: spec entries are null, a name or a list.
  const auto& wte = hybrid42["params"][0];
  CHECK(wte["name"] == "wte");
  CHECK(wte["spec"][0] == "model");
  CHECK(wte["spec"][1].is_null());
  CHECK(hybrid42["mesh"]["axes"][1] == "model");
}

TEST_CASE("inspect: --show draws a parameter's blocks") {
  auto r = inspect({"--config", source_path("configs/hybrid-2x4.yaml"), "--show", "h.0.mlp.c_fc.weight"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(r.output.find("rank 0,4") != std::string::npos);
  auto bad = inspect({"--config", source_path("configs/hybrid-2x4.yaml"), "--show", "nope"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("nope") != std::string::npos);
}

TEST_CASE("inspect: broken configs exit 2 with a message naming the culprit") {
  TempDir dir;
  struct Case { std::string name, yaml, expect; std::vector<std::string> extra; };
  const std::string base = "mesh: {shape: [2, 2], axes: [data, model]}\n"
                           "sharding_rules: [[batch, data], [vocab, model], [heads, model], [mlp, model], "
                           "[embed, null], [seq, null], [kv, null]]\n";
  std::vector<Case> cases{
      {"syntax", "mesh: {shape: [2, 2}\n", "syntax.yaml:1:", {}},
      {"unknown_key", base + "model: {n_layers: 2}\n", "n_layers", {}},
      {"bad_type", base + "model: {n_layer: two}\n", "model.n_layer", {}},
      {"negative", base + "model: {n_embd: -8}\n", "model.n_embd", {}},
      {"indivisible", base + "model: {n_embd: 32, n_head: 2}\ndata: {batch_size: 3}\n", "divisible", {}},
      {"indivisible_heads", base + "model: {n_embd: 24, n_head: 3}\n", "dim 2 of size 3", {}},
      {"unknown_axis", "mesh: {shape: [2, 2], axes: [data, model]}\nsharding_rules: [[batch, dp]]\n", "'dp'", {}},
      {"unknown_logical", "mesh: {shape: [2], axes: [data]}\nsharding_rules: [[batch, data]]\n", "which no sharding rule mentions", {}},
      {"bad_set", base, "--set", {"--set", "model.n_layer=-1"}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    std::string path = dir.file(c.name + ".yaml");
    write_file(path, c.yaml);
    std::vector<std::string> args{"--config", path};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    auto r = inspect(args);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find(c.expect) != std::string::npos, r.output);
    CHECK(r.output.find("terminate called") == std::string::npos);
  }
  auto missing = inspect({"--config", dir.file("absent.yaml")});
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("absent.yaml") != std::string::npos);
  auto no_args = inspect({});
  CHECK(no_args.exit_code == 2);
}

TEST_CASE("inspect: the GPT-2 124M configs hold GPT-2 small's 124,439,808 parameters") {
  // 50257 x 768 tied embedding + 1024 x 768 positions + 12 blocks of 7,087,872 + ln_f: the count
  // Hugging Face's GPT2LMHeadModel reports. The TP variant pads the vocab to 50260 (4 shards).
  const double expected = 124439808.0 * 4;
  CHECK(inspect_json("gpt2-124m.yaml")["totals"]["param_bytes_global"].get<double>() == expected);
  CHECK(inspect_json("gpt2-124m-dp8.yaml")["totals"]["param_bytes_global"].get<double>() == expected);
  CHECK(inspect_json("gpt2-124m-fsdp8.yaml")["totals"]["param_bytes_global"].get<double>() == expected);
  CHECK(inspect_json("gpt2-124m-tp4.yaml")["totals"]["param_bytes_global"].get<double>() == expected + 3 * 768 * 4);
}
