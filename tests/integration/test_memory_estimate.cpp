// spmd-inspect's activation estimate against what spmd-train measures: for one process (remat
// none, full, selective; dropout; bf16), a [2,2] data x tensor-parallel mesh (fp32 and bf16 matmuls),
// [1,4] sequence parallelism and FSDP-4, the per-device "activations saved for backward" of
// `spmd-inspect --json` is within 25% of summary.json's graph_bytes (the bytes the autograd graph
// holds between forward and backward, counted by the caching CPU allocator, max over ranks: the
// ranks of these meshes hold alike, so the max is any device's). A 2-stage pipeline's whole
// per-stage estimate is checked against each stage's peak. The state (parameters, gradients,
// optimizer) equals summary.json's state_bytes_per_rank exactly under AdamW and Muon.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>

#include "training_fixture.h"

using namespace spmd::test;

namespace {
// The tiny model made wider and longer so activations dominate (block 64, width 64, 4 heads); two
// steps (the last is measured, with the FSDP prefetch order recorded), no evaluation.
const std::vector<std::string> kModel{"--set", "model.block_size=64", "--set", "model.n_embd=64",
                                      "--set", "model.n_head=4",      "--set", "train.steps=2",
                                      "--set", "train.decay_steps=2", "--set", "train.warmup_steps=1",
                                      "--set", "train.eval_every=0"};

const std::string kSequenceParallelRules =
    "[[batch, data], [seq, model], [vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]]";

// Trains `name` with `args`, asks spmd-inspect about the same config, compares; returns the memory
// section of the estimate.
nlohmann::json check_estimate(const TinyRun& run, const std::string& name, const std::vector<std::string>& args) {
  CAPTURE(name);
  const auto all = with(kModel, args);
  const std::string out = run.dir.file(name);
  const auto r = run_train(run, out, all);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const int64_t measured = read_summary(out)["graph_bytes"].get<int64_t>();
  const nlohmann::json memory = inspect_json_of(run.config, all)["totals"]["per_device"];
  const int64_t estimate = memory["activations"].get<int64_t>();
  MESSAGE(name << ": activations held for backward per device, estimate " << estimate << " bytes, measured "
               << measured << " (ratio " << static_cast<double>(estimate) / static_cast<double>(measured) << ")");
  REQUIRE(measured > 0);
  CHECK(std::abs(estimate - measured) <= measured / 4);
  return memory;
}
}  // namespace

TEST_CASE("memory estimate: one process with remat none, full and selective, dropout, and bf16 matmuls") {
  TinyRun run;
  std::map<std::string, double> bytes;
  for (const std::string remat : {"none", "full", "selective"}) {
    const auto memory = check_estimate(run, "single-" + remat, {"--set", "runtime.remat=" + remat});
    CHECK(memory["remat"] == remat);
    CHECK(memory["sequence_parallel"] == false);
    bytes[remat] = memory["activations"].get<double>();
  }
  CHECK(bytes["full"] * 3 < bytes["selective"]);
  CHECK(bytes["selective"] < bytes["none"]);
  // On a CPU dropout holds nothing for backward, with or without recomputation: the fused
  // attention and the residual stream's dropout draw their masks where they apply them, and again
  // in backward (no (B, H, T, T) mask, no (B, T, C) ones).
  check_estimate(run, "single-none-dropout", {"--set", "model.dropout=0.1"});
  check_estimate(run, "single-selective-dropout", {"--set", "model.dropout=0.1", "--set", "runtime.remat=selective"});
  auto held = [&](const std::string& name) { return read_summary(run.dir.file(name))["graph_bytes"].get<int64_t>(); };
  CHECK(held("single-none-dropout") == held("single-none"));
  CHECK(held("single-selective-dropout") == held("single-selective"));
  // bf16 on a CPU: the fused attention keeps the bf16 qkv and the fp32 probabilities (a GPU's SDPA
  // keeps no probabilities).
  check_estimate(run, "single-none-bf16", {"--set", "model.matmul_dtype=bfloat16"});
  check_estimate(run, "single-selective-bf16", {"--set", "model.matmul_dtype=bfloat16", "--set", "runtime.remat=selective"});
  check_estimate(run, "single-none-bf16-dropout", {"--set", "model.matmul_dtype=bfloat16", "--set", "model.dropout=0.1"});
  CHECK(held("single-none-bf16-dropout") == held("single-none-bf16"));
}

TEST_CASE("memory estimate: [2,2] data x tensor parallel, fp32 and bf16 matmuls") {
  TinyRun run;
  const auto mesh = with(mesh_args(test_mesh("hybrid-4x2")), {"--set", "mesh.shape=[2,2]"});
  check_estimate(run, "dp-tp-2x2", mesh);
  check_estimate(run, "dp-tp-2x2-bf16", with(mesh, {"--set", "model.matmul_dtype=bfloat16"}));
}

TEST_CASE("memory estimate: [1,4] with [seq, model] sequence parallelism, remat none and full") {
  TinyRun run;
  const std::vector<std::string> mesh{"--set", "mesh.shape=[1,4]", "--set", "mesh.axes=[data,model]", "--set",
                                      "sharding_rules=" + kSequenceParallelRules};
  const auto none = check_estimate(run, "sp-1x4", mesh);
  CHECK(none["sequence_parallel"] == true);
  CHECK(none["sequence_parallel_axes"] == nlohmann::json{"model"});
  CHECK(none["sequence_parallel_degree"] == 4);
  const auto full = check_estimate(run, "sp-1x4-full", with(mesh, {"--set", "runtime.remat=full"}));
  CHECK(full["activations"].get<double>() * 3 < none["activations"].get<double>());
}

// Llama's block keeps more than GPT-2's per token (RMSNorm's normalized input, SwiGLU's three
// hidden-width tensors, a bf16 copy of the input per projection); grouped-query attention repeats
// the key/value heads before the kernel.
TEST_CASE("memory estimate: llama (2 key/value heads, untied) on one process, remat selective, and [2,2] fp32 and bf16") {
  TinyRun run;
  const std::vector<std::string> llama{"--set", "model.arch=llama", "--set", "model.n_kv_head=2", "--set",
                                       "model.intermediate_size=160"};
  check_estimate(run, "llama-single", llama);
  check_estimate(run, "llama-single-selective", with(llama, {"--set", "runtime.remat=selective"}));
  const auto mesh = with(mesh_args(test_mesh("hybrid-4x2")), {"--set", "mesh.shape=[2,2]"});
  check_estimate(run, "llama-dp-tp-2x2", with(llama, mesh));
  check_estimate(run, "llama-dp-tp-2x2-bf16", with(llama, with(mesh, {"--set", "model.matmul_dtype=bfloat16"})));
}

TEST_CASE("memory estimate: FSDP-4") {
  TinyRun run;
  check_estimate(run, "fsdp-4", with(mesh_args(test_mesh("fsdp-8")), {"--set", "mesh.shape=[4]"}));
}

// Long sequences on a narrow model, where attention's (T, T) probabilities dwarf the MLP's hidden
// layer: on a CPU the fused kernel's backward makes no (B, H, T, T) gradients (it works through one
// head's rows at a time), so the whole estimate (state, activations, the backward's working set)
// must match the run's measured peak tensor memory (summary.json's peak_tensor_bytes), within 15%.
TEST_CASE("memory estimate: the whole per-device total against the peak where attention's probabilities dominate") {
  TinyRun run;
  const auto long_rows = with(kModel, {"--set", "model.block_size=256", "--set", "model.n_embd=32"});
  for (const std::string dtype : {"float32", "bfloat16"}) {
    CAPTURE(dtype);
    const auto all = with(long_rows, {"--set", "model.matmul_dtype=" + dtype});
    const std::string out = run.dir.file("long-" + dtype);
    const auto r = run_train(run, out, all);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const double measured = read_summary(out)["peak_tensor_bytes"].get<double>();
    const auto memory = inspect_json_of(run.config, all)["totals"]["per_device"];
    const double estimate = memory["total"].get<double>();
    MESSAGE(dtype << ": estimate " << estimate << " bytes (backward working set "
                  << memory["backward_working_set"].get<double>() << "), measured peak " << measured << " (ratio "
                  << estimate / measured << ")");
    CHECK(std::abs(estimate - measured) <= 0.15 * measured);
  }
}

// A pipeline's later stage sends each backward's input gradient back, and each send keeps its
// buffer until the step's end: with one microbatch in flight, its last backward runs beside the
// earlier ones' sends. Each stage's whole estimate (state, activations, sends, a backward's working
// set, the recomputed block under remat full) against the stage's measured peak tensor memory
// (summary.json's peak_tensor_bytes_per_stage), within 15%.
TEST_CASE("memory estimate: each stage of a 2-stage 1F1B pipeline against its peak, gradient sends included") {
  TinyRun run;
  const std::vector<std::string> pipe{
      "--set", "mesh.shape=[2]", "--set", "mesh.axes=[stage]", "--set",
      "sharding_rules=[[batch, null], [layers, stage], [vocab, null], [heads, null], [mlp, null], [embed, null], "
      "[seq, null], [kv, null]]",
      "--set", "runtime.pipeline_schedule=1f1b", "--set", "train.microbatches=4"};
  for (const std::string remat : {"none", "full"}) {
    CAPTURE(remat);
    const auto all = with(kModel, with(pipe, {"--set", "runtime.remat=" + remat}));
    const std::string out = run.dir.file("pp2-" + remat);
    const auto r = run_train(run, out, all);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const auto peaks = read_summary(out)["peak_tensor_bytes_per_stage"];
    const auto j = inspect_json_of(run.config, all);
    const auto& stages = j["pipeline"]["stage_list"];
    REQUIRE(peaks.size() == 2);
    for (size_t s = 0; s < 2; ++s) {
      const double estimate = stages[s]["total_bytes"].get<double>(), measured = peaks[s].get<double>();
      MESSAGE("stage " << s << " (remat " << remat << "): estimate " << estimate << " bytes, measured peak "
                       << measured << " (ratio " << estimate / measured << ")");
      CHECK(std::abs(estimate - measured) <= 0.15 * measured);
    }
    // Only the last stage sends: 3 of its 4 sends are held at its last backward.
    CHECK(stages[0]["gradient_send_bytes"] == 0);
    CHECK(stages[1]["gradient_send_bytes"] == 3 * 2 * 64 * 64 * 4);  // (rows 2, T 64, C 64) fp32 each
  }
}

// Parameters, gradients and optimizer state are parameter-shaped: the estimate is what the run
// allocates (summary.json's state_bytes_per_rank), to the byte, under AdamW (m and v everywhere)
// and Muon (one momentum buffer per block matrix, m and v for the rest), on one process and FSDP-4;
// Muon's is smaller by its matrices' bytes on the device.
TEST_CASE("memory estimate: optimizer state under AdamW and Muon equals what the run allocates") {
  TinyRun run;
  const std::vector<std::string> short_run{"--set", "train.steps=1", "--set", "train.decay_steps=1", "--set",
                                           "train.warmup_steps=0", "--set", "train.eval_every=0"};
  const std::vector<std::string> muon{"--set", "train.optimizer=muon"};
  for (const auto& [name, mesh] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"single", {}}, {"fsdp-4", with(mesh_args(test_mesh("fsdp-8")), {"--set", "mesh.shape=[4]"})}}) {
    CAPTURE(name);
    std::map<std::string, nlohmann::json> estimate;
    for (const std::string optimizer : {"adamw", "muon"}) {
      const auto args = with(with(short_run, mesh), optimizer == "muon" ? muon : std::vector<std::string>{});
      const std::string out = run.dir.file(name + "-" + optimizer);
      const auto r = run_train(run, out, args);
      REQUIRE_MESSAGE(r.exit_code == 0, r.output);
      const int64_t measured = read_summary(out)["state_bytes_per_rank"].get<int64_t>();
      estimate[optimizer] = inspect_json_of(run.config, args)["totals"]["per_device"];
      const nlohmann::json& e = estimate[optimizer];
      const int64_t state = e["params"].get<int64_t>() + e["grads"].get<int64_t>() + e["optimizer"].get<int64_t>();
      MESSAGE(name << " " << optimizer << ": parameters, gradients and optimizer state per device, estimate " << state
                   << " bytes, measured " << measured);
      CHECK(state == measured);
    }
    const int64_t matrices = estimate["muon"]["muon_momentum"].get<int64_t>();
    CHECK(matrices > 0);
    CHECK(estimate["adamw"]["muon_momentum"].get<int64_t>() == 0);
    CHECK(estimate["adamw"]["optimizer"].get<int64_t>() - estimate["muon"]["optimizer"].get<int64_t>() == matrices);
  }
}

// Routed experts (model.moe): 8 experts of width 96, 2 per token, in both layers of the llama. The
// activation estimate (k routed rows per token through the device's experts, the router's and the
// mixing's tensors; balanced routing assumed) against graph_bytes, on one process and with the
// experts split over the data axis and over an axis of their own; the state exactly, each device
// holding its share of the experts; the whole estimate against the peak within 15%.
TEST_CASE("memory estimate: routed experts on one process, over the data axis and over their own axis") {
  TinyRun run;
  const std::vector<std::string> moe{"--set", "model.arch=llama", "--set", "model.n_kv_head=2", "--set",
                                     "model.tie_embeddings=false", "--set", "model.moe.num_experts=8", "--set",
                                     "model.moe.num_experts_per_tok=2", "--set", "model.moe.moe_intermediate_size=96",
                                     "--set", "model.moe.norm_topk_prob=true"};
  const std::string others = "[vocab, null], [heads, null], [mlp, null], [embed, null], [seq, null], [kv, null]]";
  const std::map<std::string, std::vector<std::string>> cases{
      {"moe-single", mesh_args("[1]", "[data]", "[[batch, data], [expert, null], " + others)},
      {"moe-ep-2-data", mesh_args("[2]", "[data]", "[[batch, data], [expert, data], " + others)},
      {"moe-ep-2-own-axis", mesh_args("[2,2]", "[data,expert]", "[[batch, [data, expert]], [expert, expert], " + others)}};
  std::map<std::string, nlohmann::json> memory;
  for (const auto& [name, mesh] : cases) {
    memory[name] = check_estimate(run, name, with(moe, mesh));
    const nlohmann::json& e = memory[name];
    const int64_t state = e["params"].get<int64_t>() + e["grads"].get<int64_t>() + e["optimizer"].get<int64_t>();
    const nlohmann::json summary = read_summary(run.dir.file(name));
    CHECK(state == summary["state_bytes_per_rank"].get<int64_t>());
    // The whole estimate, the backward's working set (the routed rows' hidden gradients, the
    // exchanged gradient) included, against the run's peak tensor memory.
    const double peak = summary["peak_tensor_bytes"].get<double>(), total = e["total"].get<double>();
    MESSAGE(name << ": whole estimate " << total << " bytes, measured peak " << peak);
    CHECK(std::abs(total - peak) <= 0.15 * peak);
  }
  // The experts' gate, up and down, (8, 64, 96) each, in 2 layers: half of them on each of 2 devices.
  const int64_t experts = 2 * 3 * 8 * 64 * 96 * 4;
  CHECK(memory["moe-single"]["params"].get<int64_t>() - memory["moe-ep-2-data"]["params"].get<int64_t>() == experts / 2);
  CHECK(memory["moe-ep-2-own-axis"]["params"] == memory["moe-ep-2-data"]["params"]);
  // Each device of the [2, 2] mesh routes a quarter of the batch: a quarter of the routed activations.
  CHECK(memory["moe-ep-2-own-axis"]["activations"].get<int64_t>() < memory["moe-ep-2-data"]["activations"].get<int64_t>());
}

// Routing is not balanced: with the experts over 2 devices the fuller one holds more routed rows
// than the balanced estimate. --expert-load F sizes them for a device whose experts get F x their
// mean rows: given the measured step's own device_load_max_over_mean (metrics.jsonl), the estimate
// meets what the fuller rank held. The load scales the routed rows linearly, up to what routing can
// send (every token's 2 rows to one device's 4 experts: 2x), and changes nothing without expert
// parallelism.
TEST_CASE("memory estimate: --expert-load sizes routed experts for the measured imbalance, up to what routing can send") {
  TinyRun run;
  const std::string others = "[vocab, null], [heads, null], [mlp, null], [embed, null], [seq, null], [kv, null]]";
  const auto moe = with(kModel, {"--set", "model.arch=llama", "--set", "model.n_kv_head=2", "--set",
                                 "model.tie_embeddings=false", "--set", "model.moe.num_experts=8", "--set",
                                 "model.moe.num_experts_per_tok=2", "--set", "model.moe.moe_intermediate_size=96"});
  const auto ep = with(moe, mesh_args("[2]", "[data]", "[[batch, data], [expert, data], " + others));
  const auto activations = [&](const std::vector<std::string>& args, const std::string& load) {
    const nlohmann::json j = inspect_json_of(run.config, with(args, {"--expert-load", load}));
    return j["totals"]["per_device"]["activations"].get<double>();
  };
  const std::string out = run.dir.file("ep");
  const auto r = run_train(run, out, ep);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const double measured = read_summary(out)["graph_bytes"].get<double>();
  // The measured (last) step's fullest device over its sparse layers, and the fullest expert's.
  double device_load = 0, expert_load = 0;
  std::ifstream metrics(out + "/metrics.jsonl");
  std::string line, last_line;
  while (std::getline(metrics, line)) last_line = line;
  const nlohmann::json last = nlohmann::json::parse(last_line);
  for (const auto& [key, value] : last.items()) {
    if (key.find("/device_load_max_over_mean") != std::string::npos) device_load = std::max(device_load, value.get<double>());
    else if (key.find("/load_max_over_mean") != std::string::npos) expert_load = std::max(expert_load, value.get<double>());
  }
  REQUIRE(device_load > 1);
  CHECK(device_load <= expert_load);  // a device's experts average out
  const double balanced = activations(ep, "1"), sized = activations(ep, std::to_string(device_load));
  MESSAGE("fuller rank held " << measured << " bytes; estimate balanced " << balanced << ", at the measured device load "
                              << device_load << ": " << sized);
  CHECK(balanced < 0.95 * measured);  // the fuller rank is fuller than balanced
  CHECK(std::abs(sized - measured) <= 0.08 * measured);  // observed 4% over
  // Linear in the load up to 2x, then capped.
  const double a15 = activations(ep, "1.5"), a2 = activations(ep, "2");
  CHECK(a15 - balanced == doctest::Approx(a2 - a15).epsilon(1e-4));
  CHECK(activations(ep, "3") == a2);
  const nlohmann::json j = inspect_json_of(run.config, with(ep, {"--expert-load", "3"}));
  CHECK(j["experts"]["max_load"].get<double>() == 2);
  CHECK(j["experts"]["load"].get<double>() == 2);
  // Without expert parallelism a device computes its own tokens' rows however they are routed.
  const auto single = with(moe, mesh_args("[1]", "[data]", "[[batch, data], [expert, null], " + others));
  CHECK(activations(single, "2") == activations(single, "1"));
}
