// spmd-inspect run as a real process: every shipped config, JSON totals, broken configs.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "test_support.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {
ProcessResult inspect(const std::vector<std::string>& args) {
  std::vector<std::string> argv{binary_path("spmd-inspect")};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, {}, 60);
}

nlohmann::json inspect_json(const std::string& config) { return inspect_json_of(source_path("configs/" + config)); }

// 4 blocks staged over the 4 stages of a [2, 4] (data, stage) mesh, 8 microbatches per step.
const char* kPipelineYaml = "mesh: {shape: [2, 4], axes: [data, stage]}\n"
                            "sharding_rules: [[batch, data], [layers, stage], [vocab, null], [heads, null], "
                            "[mlp, null], [embed, null], [seq, null], [kv, null]]\n"
                            "model: {vocab_size: 72, block_size: 16, n_layer: 4, n_head: 8, n_embd: 32}\n"
                            "data: {batch_size: 16}\n"
                            "train: {microbatches: 8}\n";

// The line holding `needle` ("" when none).
std::string line_of(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  const size_t begin = text.rfind('\n', at) + 1;  // npos + 1 == 0
  return text.substr(begin, text.find('\n', at) - begin);
}

bool holds(const nlohmann::json& stage, const std::string& param) {
  for (const auto& name : stage["params"])
    if (name == param) return true;
  return false;
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
      {"indivisible", base + "model: {n_embd: 32, n_head: 2}\ndata: {batch_size: 3}\n", "does not divide over mesh axis 'data' of size 2", {}},
      {"indivisible_heads", base + "model: {n_embd: 24, n_head: 3}\n", "dim 2 (logical axis 'heads', model.n_head = 3) does not divide over mesh axis 'model' of size 2", {}},
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

TEST_CASE("inspect: GPT-2 124M fits on one screen, memory verdict first, JSON and --all list every parameter") {
  const std::string config = source_path("configs/gpt2-124m.yaml");
  auto text = inspect({"--config", config, "--device-memory", "80GiB"});
  REQUIRE_MESSAGE(text.exit_code == 0, text.output);
  CHECK_MESSAGE(std::count(text.output.begin(), text.output.end(), '\n') <= 50, text.output);
  CHECK(text.output.find("memory per device") < text.output.find("parameter "));
  CHECK(text.output.find("verdict: fits in 80.00 GiB per device") != std::string::npos);
  CHECK(line_of(text.output, "h.{0..11}.attn.c_attn.weight").find(" x12 ") != std::string::npos);
  CHECK(text.output.find("h.3.") == std::string::npos);

  auto tight = inspect({"--config", config, "--device-memory", "1GiB"});
  CHECK_MESSAGE(tight.output.find("verdict: does not fit in 1.00 GiB per device") != std::string::npos, tight.output);
  CHECK(tight.output.find("the largest term is") != std::string::npos);
  auto bad = inspect({"--config", config, "--device-memory", "lots"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("--device-memory 'lots'") != std::string::npos);

  auto all = inspect({"--config", config, "--all"});
  CHECK(all.output.find("h.3.attn.c_attn.weight") != std::string::npos);
  const auto json = inspect_json_of(config);
  CHECK(json["params"].size() == 2 + 12 * 12 + 2);  // wte, wpe; 12 per block with biases; ln_f
  CHECK(json["totals"]["dominant_term"].is_string());
}

TEST_CASE("inspect: the GPT-2 124M configs hold GPT-2 small's 124,439,808 parameters") {
  // 50257 x 768 tied embedding + 1024 x 768 positions + 12 blocks of 7,087,872 + ln_f: the count
  // Hugging Face's GPT2LMHeadModel reports, plus the padding rows of the stored table: the vocab
  // padded to 50304 (a multiple of 64), and to 50432 by the TP variant (4 shards of 64 x 197).
  const double expected = 124439808.0 * 4;
  auto padding = [](double rows) { return (rows - 50257) * 768 * 4; };
  CHECK(inspect_json("gpt2-124m.yaml")["totals"]["param_bytes_global"].get<double>() == expected + padding(50304));
  CHECK(inspect_json("gpt2-124m-dp8.yaml")["totals"]["param_bytes_global"].get<double>() == expected + padding(50304));
  CHECK(inspect_json("gpt2-124m-fsdp8.yaml")["totals"]["param_bytes_global"].get<double>() == expected + padding(50304));
  CHECK(inspect_json("gpt2-124m-tp4.yaml")["totals"]["param_bytes_global"].get<double>() == expected + padding(50432));
}

TEST_CASE("inspect: llama configs: SmolLM2-135M's 134,515,008 parameters, and llama-tiny's key/value heads split") {
  // 30 blocks of q, o 576^2, k, v 576 x 192, gate, up, down 576 x 1536, two norms; ln_f; the tied
  // 49152 x 576 embedding: the count Hugging Face reports for SmolLM2-135M.
  const nlohmann::json smol = inspect_json("smollm2-135m.yaml");
  CHECK(smol["totals"]["param_bytes_global"].get<double>() == 134515008.0 * 4);
  const nlohmann::json tiny = inspect_json("llama-tiny.yaml");  // [2, 2] data x model, 4 heads, 2 key/value heads
  bool seen_k = false, seen_head = false;
  for (const auto& p : tiny["params"]) {
    if (p["name"] == "h.0.attn.k.weight") {
      seen_k = true;
      CHECK(p["shape"] == nlohmann::json{128, 2, 32});
      CHECK(p["shard_shape"] == nlohmann::json{128, 1, 32});  // one key/value head per model rank
    }
    if (p["name"] == "lm_head") {
      seen_head = true;
      CHECK(p["logical"] == nlohmann::json{"vocab", "embed"});
    }
    CHECK(p["name"] != "wpe");
  }
  CHECK(seen_k);
  CHECK(seen_head);
}

// Routed experts: Mixtral-8x7B's 46,702,792,704 parameters (32 blocks of q, o 4096^2, k, v 4096 x
// 1024, a 4096 x 8 router, 8 experts of gate, up, down 4096 x 14336, two norms; ln_f; embedding and
// head 32000 x 4096), 12,879,925,248 active (2 of 8 experts), one expert per device on its own
// 8-way axis; moe-tiny's 8 experts 4 per device over the data axis, shown in the text too.
TEST_CASE("inspect: expert configs: Mixtral-8x7B's parameters, active parameters and expert shards") {
  const nlohmann::json mixtral = inspect_json("mixtral-8x7b.yaml");
  CHECK(mixtral["totals"]["param_bytes_global"].get<double>() == 46702792704.0 * 4);
  CHECK(mixtral["experts"]["active_params"].get<double>() == 12879925248.0);
  CHECK(mixtral["experts"]["axes"] == nlohmann::json{"expert"});
  CHECK(mixtral["experts"]["per_device"] == 1);
  // Dropless routing can send a device every token's rows for its one expert: 8 x 1 / 2 = 4x.
  CHECK(mixtral["experts"]["max_load"].get<double>() == 4);
  CHECK(mixtral["experts"]["load"].get<double>() == 1);
  // Qwen3-30B-A3B: 48 blocks of q, o 2048 x 32 x 128, k, v 2048 x 4 x 128, the per-head norms (128
  // each), a 2048 x 128 router, 128 experts of gate, up, down 2048 x 768, two norms; ln_f; embedding
  // and head 151936 x 2048: 30,532,122,624 parameters, 3,353,032,704 active (8 of 128 experts).
  const nlohmann::json qwen = inspect_json("qwen3-30b-a3b.yaml");
  CHECK(qwen["totals"]["param_bytes_global"].get<double>() == 30532122624.0 * 4);
  CHECK(qwen["experts"]["active_params"].get<double>() == 3353032704.0);
  CHECK(qwen["experts"]["per_device"] == 16);
  CHECK(qwen["experts"]["max_load"].get<double>() == 8);  // 8 devices, each able to take all 8 of a token's rows
  const nlohmann::json tiny = inspect_json("moe-tiny.yaml");
  CHECK(tiny["experts"]["num_experts"] == 8);
  CHECK(tiny["experts"]["per_device"] == 4);
  CHECK(tiny["experts"]["sparse_layers"] == 4);
  int seen = 0;
  for (const auto& p : tiny["params"]) {
    if (p["name"] == "h.0.moe.experts.down") {
      ++seen;
      CHECK(p["logical"] == nlohmann::json{"expert", "mlp", "embed"});
      CHECK(p["spec"] == nlohmann::json{"data", nullptr, nullptr});
      CHECK(p["shard_shape"] == nlohmann::json{4, 128, 128});
      CHECK(p["bytes_per_device"] == 4 * 128 * 128 * 4);
    }
    if (p["name"] == "h.0.moe.router.weight") {
      ++seen;
      CHECK(p["logical"] == nlohmann::json{"embed", nullptr});
    }
  }
  CHECK(seen == 2);
  const auto text = inspect({"--config", source_path("configs/moe-tiny.yaml")});
  REQUIRE(text.exit_code == 0);
  CHECK(text.output.find("experts: 8 per sparse layer in 4 of 4 layers, 2 per token") != std::string::npos);
  CHECK_MESSAGE(text.output.find("routing: a device's routed rows at most 2.00x balanced") != std::string::npos,
                text.output);
}

TEST_CASE("inspect: a pipeline's stages, what they hold, their memory and the bubble") {
  TempDir dir;
  const std::string path = dir.file("pipeline.yaml");
  write_file(path, kPipelineYaml);
  auto one_f_one_b = inspect_json_of(path, {"--set", "runtime.pipeline_schedule=1f1b"});
  auto gpipe = inspect_json_of(path, {"--set", "runtime.pipeline_schedule=gpipe"});
  const auto& pipeline = one_f_one_b["pipeline"];
  CHECK(pipeline["axis"] == "stage");
  CHECK(pipeline["stages"] == 4);
  CHECK(pipeline["microbatches"] == 8);
  CHECK(pipeline["schedule"] == "1f1b");
  CHECK(gpipe["pipeline"]["schedule"] == "gpipe");
  CHECK(pipeline["bubble_fraction"].get<double>() == doctest::Approx(3.0 / 11));  // (p-1)/(M+p-1)
  const auto& stages = pipeline["stage_list"];
  const auto& gpipe_stages = gpipe["pipeline"]["stage_list"];
  REQUIRE(stages.size() == 4);
  REQUIRE(gpipe_stages.size() == 4);
  int64_t param_bytes = 0;
  for (int s = 0; s < 4; ++s) {
    CAPTURE(s);
    CHECK(stages[s]["stage"] == s);
    CHECK(stages[s]["layers"] == nlohmann::json{s, s + 1});  // [begin, end) of the blocks
    CHECK(holds(stages[s], "h." + std::to_string(s) + ".mlp.c_fc.weight"));
    CHECK(stages[s]["microbatches_in_flight"] == 4 - s);      // 1F1B: min(stages - stage, M)
    CHECK(gpipe_stages[s]["microbatches_in_flight"] == 8);    // GPipe: every microbatch
    CHECK(stages[s]["activation_bytes"] ==
          stages[s]["activation_bytes_per_microbatch"].get<int64_t>() * (4 - s));
    param_bytes += stages[s]["param_bytes"].get<int64_t>();
  }
  CHECK(gpipe_stages[0]["activation_bytes"].get<int64_t>() > stages[0]["activation_bytes"].get<int64_t>());
  // The embeddings live on the first stage, the final norm and the head (wte, tied) on the last.
  CHECK(holds(stages[0], "wte"));
  CHECK(holds(stages[0], "wpe"));
  CHECK_FALSE(holds(stages[1], "wte"));
  CHECK_FALSE(holds(stages[3], "wpe"));
  CHECK(holds(stages[3], "wte"));
  CHECK(holds(stages[3], "ln_f.weight"));
  CHECK(stages[0]["holds"] == "h.0 + embeddings (wte, wpe)");
  CHECK(stages[3]["holds"] == "h.3 + ln_f, head (wte tied)");
  // No stage holds another's parameters: the stages together hold the model once, wte twice.
  const auto& wte = one_f_one_b["params"][0];
  REQUIRE(wte["name"] == "wte");
  CHECK(wte["stages"] == nlohmann::json{0, 3});
  CHECK(param_bytes == one_f_one_b["totals"]["param_bytes_global"].get<int64_t>() +
                           wte["bytes_per_device"].get<int64_t>());
  // The per-device totals are the fullest stage's.
  const int64_t fullest = one_f_one_b["totals"]["per_device_stage"].get<int64_t>();
  for (const auto& stage : stages)
    CHECK(stage["total_bytes"].get<int64_t>() <= one_f_one_b["totals"]["per_device"]["total"].get<int64_t>());
  CHECK(stages[fullest]["total_bytes"] == one_f_one_b["totals"]["per_device"]["total"]);
  CHECK(one_f_one_b["totals"]["param_bytes_per_device"] == stages[fullest]["param_bytes"]);

  auto text = inspect({"--config", path});
  REQUIRE_MESSAGE(text.exit_code == 0, text.output);
  CHECK(text.output.find("pipeline: blocks staged over mesh axis 'stage' (4 stages), 1f1b schedule") !=
        std::string::npos);
  CHECK(text.output.find("3/11 = 27.3%") != std::string::npos);
  CHECK(text.output.find("h.3 + ln_f, head (wte tied)") != std::string::npos);
}

TEST_CASE("inspect: an interleaved pipeline's chunks, timetable, bubble and every schedule's activations in flight") {
  // configs/interleaved-4.yaml: 8 blocks on 4 stages x 2 chunks, 8 microbatches.
  const auto json = inspect_json("interleaved-4.yaml");
  const auto& pipeline = json["pipeline"];
  CHECK(pipeline["schedule"] == "interleaved");
  CHECK(pipeline["virtual_stages"] == 2);
  CHECK(pipeline["bubble_fraction"].get<double>() == doctest::Approx(3.0 / 19));  // (p-1)/(vM+p-1)
  const auto& stages = pipeline["stage_list"];
  REQUIRE(stages.size() == 4);
  for (int s = 0; s < 4; ++s) {  // chunk k of stage s is virtual stage 4k + s: blocks s and s + 4
    CAPTURE(s);
    CHECK(stages[s]["chunks"] == nlohmann::json{{s, s + 1}, {s + 4, s + 5}});
    CHECK(holds(stages[s], "h." + std::to_string(s + 4) + ".mlp.c_fc.weight"));
    CHECK_FALSE(holds(stages[s], "h." + std::to_string((s + 1) % 4) + ".mlp.c_fc.weight"));
    // Megatron's warm-up 2 (p-1-s) + (v-1) p forwards, plus the first steady one.
    CHECK(stages[s]["microbatches_in_flight"] == 2 * (3 - s) + 4 + 1);
  }
  CHECK(stages[1]["holds"] == "h.1, h.5");
  CHECK(stages[3]["holds"] == "h.3, h.7 + ln_f, head (wte tied)");
  // The timetable: 4 rows of 2 (vM + p - 1) = 38 slots; stage 0 starts chunk 0 of microbatches
  // 0-3, then chunk 1 of microbatch 0 as soon as stage 3 has passed it on.
  const auto& detail = pipeline["schedule_detail"];
  REQUIRE(detail["timetable"].size() == 4);
  CHECK(detail["timetable"][0].size() == 38);
  CHECK(detail["timetable"][0][0] == "F0.0");
  CHECK(detail["timetable"][0][4] == "F0.1");
  CHECK(detail["timetable"][3][0] == ".");  // stage 3 waits for its first activation
  CHECK(detail["timetable_idle_fraction"].get<double>() == doctest::Approx(3.0 / 19));
  // Every schedule side by side.
  REQUIRE(detail["schedules"].size() == 3);
  const auto& gpipe = detail["schedules"][0];
  const auto& one_f_one_b = detail["schedules"][1];
  const auto& interleaved = detail["schedules"][2];
  CHECK(gpipe["in_flight_per_stage"] == nlohmann::json{8, 8, 8, 8});
  CHECK(one_f_one_b["in_flight_per_stage"] == nlohmann::json{4, 3, 2, 1});
  CHECK(interleaved["in_flight_per_stage"] == nlohmann::json{11, 9, 7, 5});
  CHECK(one_f_one_b["bubble_fraction"].get<double>() == doctest::Approx(3.0 / 11));
  CHECK(one_f_one_b["timetable_idle_fraction"].get<double>() == doctest::Approx(3.0 / 11));
  CHECK(interleaved["timetable_idle_fraction"].get<double>() == doctest::Approx(3.0 / 19));

  auto text = inspect({"--config", source_path("configs/interleaved-4.yaml")});
  REQUIRE_MESSAGE(text.exit_code == 0, text.output);
  CHECK(text.output.find("(4 stages x 2 chunks), interleaved schedule") != std::string::npos);
  CHECK(text.output.find("3/19 = 15.8%") != std::string::npos);
  CHECK(line_of(text.output, "  stage 0  F0.0").find("F0.1") != std::string::npos);
  CHECK(line_of(text.output, "interleaved (v = 2)").find("11, 9, 7, 5") != std::string::npos);
}

TEST_CASE("inspect: without a layers rule there is no pipeline") {
  auto hybrid = inspect_json("hybrid-4x2.yaml");
  CHECK_FALSE(hybrid.contains("pipeline"));
  CHECK(hybrid["totals"]["per_device_stage"] == 0);
  CHECK_FALSE(hybrid["params"][0].contains("stages"));
  CHECK(hybrid["totals"]["per_device"]["microbatches_in_flight"] == 1);
  auto text = inspect({"--config", source_path("configs/hybrid-4x2.yaml")});
  CHECK(text.output.find("pipeline") == std::string::npos);
}

TEST_CASE("inspect: the activation estimate follows runtime.remat and sequence parallelism") {
  // hybrid-2x4's model on [2, 4]; the same mesh with the residual stream split along the sequence.
  const std::string config = source_path("configs/hybrid-2x4.yaml");
  auto memory = [&](const std::vector<std::string>& extra) { return inspect_json_of(config, extra)["totals"]; };
  const auto none = memory({"--set", "runtime.remat=none"});
  const auto full = memory({"--set", "runtime.remat=full"});
  const auto selective = memory({"--set", "runtime.remat=selective"});
  auto activations = [](const nlohmann::json& totals) { return totals["per_device"]["activations"].get<int64_t>(); };
  CHECK(none["per_device"]["remat"] == "none");
  CHECK(full["per_device"]["remat"] == "full");
  CHECK(selective["per_device"]["remat"] == "selective");
  CHECK(full["single_device"]["remat"] == "full");  // the one-device column assumes the same policy
  CHECK(activations(full) * 3 < activations(selective));
  CHECK(activations(selective) < activations(none));
  // Only the activations change, and the recomputed block that remat full holds in backward.
  auto recompute = [](const nlohmann::json& totals) { return totals["per_device"]["recompute"].get<int64_t>(); };
  CHECK(recompute(none) == 0);
  CHECK(recompute(full) > recompute(selective));
  CHECK(recompute(selective) > 0);
  CHECK(full["per_device"]["params"] == none["per_device"]["params"]);
  CHECK(full["per_device"]["total"].get<int64_t>() - activations(full) - recompute(full) ==
        none["per_device"]["total"].get<int64_t>() - activations(none));
  // The parts add up; full keeps one (B, T, C) stream per block.
  const auto& parts = full["per_device"]["activation_parts_per_microbatch"];
  CHECK(parts["stage_input"].get<int64_t>() + parts["blocks"].get<int64_t>() + parts["head"].get<int64_t>() ==
        full["per_device"]["activations_per_microbatch"].get<int64_t>());
  CHECK(parts["per_block"] == 8 * 64 * 128 * 4);  // 16 sequences over 2 data-parallel ranks, block 64, width 128

  const std::string sp_rules =
      "sharding_rules=[[batch, data], [seq, model], [vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]]";
  const auto sp = memory({"--set", sp_rules});
  CHECK(none["per_device"]["sequence_parallel"] == false);
  CHECK(none["per_device"]["sequence_parallel_axes"] == nlohmann::json::array());
  CHECK(sp["per_device"]["sequence_parallel"] == true);
  CHECK(sp["per_device"]["sequence_parallel_axes"] == nlohmann::json{"model"});
  CHECK(sp["per_device"]["sequence_parallel_degree"] == 4);
  CHECK(sp["single_device"]["sequence_parallel"] == false);
  CHECK(activations(sp) < activations(none));
  const auto sp_full = memory({"--set", sp_rules, "--set", "runtime.remat=full"});
  CHECK(sp_full["per_device"]["activation_parts_per_microbatch"]["per_block"] == 8 * 16 * 128 * 4);  // T/4 positions

  auto text = inspect({"--config", config, "--set", sp_rules, "--set", "runtime.remat=full"});
  REQUIRE_MESSAGE(text.exit_code == 0, text.output);
  CHECK_MESSAGE(text.output.find("activations saved for backward (remat full; sequence parallel over model, T/4)") !=
                    std::string::npos,
                text.output);
}
