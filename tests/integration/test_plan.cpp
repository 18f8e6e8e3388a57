// spmd-inspect --plan and --calibrate as real processes: the layouts the planner emits (context
// parallelism included) train to the one-process loss on 4 ranks (the invariance guarantee covers
// plans), the ranking and the budget hold, the cost model's compute term is the model's FLOPs (an
// interleaved stage's over all its chunks) and its context-parallel term the K/V collectives, and
// bad input exits 2.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "training_fixture.h"

using namespace spmd::test;

namespace {
// Rates written by hand, as for a cluster one is not on (docs/planner.md), so that the ranking
// does not depend on this machine's load.
const char* kRates = R"({"matmul_TFLOPs": 0.05, "memory_GBps": 10,
  "group_sizes": {"2": {"latency_us": 50, "bandwidth_GBps": 2}, "4": {"latency_us": 80, "bandwidth_GBps": 1.5}},
  "gather_group_sizes": {"4": {"latency_us": 120, "bandwidth_GBps": 0.5}}})";

// The tiny run, shortened: 6 steps, one evaluation at the end.
const std::vector<std::string> kPlanShort = {"--set", "train.steps=6", "--set", "train.decay_steps=6", "--set",
                                         "train.eval_every=6"};

ProcessResult inspect(const TinyRun& run, const std::vector<std::string>& args) {
  return run_process(with({binary_path("spmd-inspect"), "--config", run.config}, with(kPlanShort, args)), {}, 120);
}

nlohmann::json plans(const TinyRun& run, const std::string& rates, const std::vector<std::string>& extra = {}) {
  const auto r = inspect(run, with({"--plan", "--devices", "4", "--rates", rates, "--json", "--top", "100000"}, extra));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return nlohmann::json::parse(r.output);
}

std::string rates_file(const TinyRun& run) {
  const std::string path = run.dir.file("rates.json");
  write_file(path, kRates);
  return path;
}

// The layout without the settings that only trade memory for time (microbatches, schedule, remat).
std::string layout_key(const nlohmann::json& p) {
  return p["mesh"].dump() + (p["sequence_parallel"].get<bool>() ? " sp" : "");
}
}  // namespace

TEST_CASE("plan: every layout the planner emits for a tiny model on 4 ranks trains to the one-process loss") {
  TinyRun run;
  const std::string rates = rates_file(run);
  const nlohmann::json all = plans(run, rates)["plans"];
  // One run per distinct mesh and rule set; the microbatch, schedule and remat variants rotate
  // over them, so every kind of setting runs too.
  std::map<std::string, std::vector<nlohmann::json>> by_layout;
  for (const auto& p : all) by_layout[layout_key(p)].push_back(p);
  REQUIRE(by_layout.size() >= 13);  // DP, FSDP, CP, TP, TP+SP, PP and their mixes over 4 devices
  const Curve reference = train(run, run.dir.file("one"), kPlanShort);
  std::set<std::string> remats, schedules;
  std::set<int> contexts;  // context-parallel degrees run, alone and beside data, FSDP, tensor and stage axes
  size_t turn = 0;
  for (const auto& [key, variants] : by_layout) {
    const nlohmann::json& p = variants[turn++ % variants.size()];
    CAPTURE(p["sharding"].get<std::string>());
    remats.insert(p["remat"].get<std::string>());
    contexts.insert(p["context"].get<int>());
    if (p["stage"].get<int>() > 1) schedules.insert(p["schedule"].get<std::string>());
    const auto emitted = inspect(run, {"--plan", "--devices", "4", "--rates", rates, "--emit", std::to_string(p["rank"].get<int>())});
    REQUIRE_MESSAGE(emitted.exit_code == 0, emitted.output);
    const std::string yaml = run.dir.file("plan-" + std::to_string(p["rank"].get<int>()) + ".yaml");
    write_file(yaml, emitted.output);
    const std::string out = run.dir.file("out-" + std::to_string(p["rank"].get<int>()));
    const auto r = run_process({binary_path("spmd-train"), "--config", yaml, "--set", "output.dir=" + out}, {}, 300);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK(read_summary(out)["ranks"] == 4);
    CHECK(read_summary(out)["context_parallel"] == p["context"]);
    check_same_curve(read_metrics(out + "/metrics.jsonl"), reference, kFloatRounding);
  }
  CHECK(remats == std::set<std::string>{"full", "none", "selective"});
  CHECK(schedules == std::set<std::string>{"1f1b", "gpipe"});
  CHECK(contexts == std::set<int>{1, 2, 4});
}

TEST_CASE("plan: a llama's plans split key/value heads only where they divide, and the best trains to one process") {
  TinyRun run;
  const std::string rates = rates_file(run);
  const std::vector<std::string> llama = with(kTinyLlama, {"--set", "model.n_kv_head=1"});  // 4 query heads, 1 key/value head
  const nlohmann::json all = plans(run, rates, llama)["plans"];
  REQUIRE(all.size() > 0);
  bool data_parallel = false;
  for (const auto& p : all) {
    CAPTURE(p["sharding"].get<std::string>());
    CHECK(p["model"].get<int>() == 1);  // the one key/value head splits over no tensor axis
    data_parallel = data_parallel || p["data"].get<int>() == 4;
  }
  CHECK(data_parallel);
  const auto emitted = inspect(run, with(llama, {"--plan", "--devices", "4", "--rates", rates, "--emit", "1"}));
  REQUIRE_MESSAGE(emitted.exit_code == 0, emitted.output);
  CHECK(emitted.output.find("arch: llama") != std::string::npos);
  const std::string yaml = run.dir.file("llama-plan.yaml");
  write_file(yaml, emitted.output);
  const Curve reference = train(run, run.dir.file("llama-one"), with(kPlanShort, llama));
  const std::string out = run.dir.file("llama-plan-out");
  const auto r = run_process({binary_path("spmd-train"), "--config", yaml, "--set", "output.dir=" + out}, {}, 300);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  check_same_curve(read_metrics(out + "/metrics.jsonl"), reference, kFloatRounding);
}

TEST_CASE("plan: an interleaved plan and a context-parallel ring plan, as emitted, train to the one-process loss") {
  TinyRun run;  // four blocks, so that two stages can each hold two chunks
  const std::string rates = rates_file(run);
  const std::vector<std::string> four_blocks{"--set", "model.n_layer=4"};
  const nlohmann::json all = plans(run, rates, four_blocks)["plans"];
  const Curve reference = train(run, run.dir.file("one"), with(kPlanShort, four_blocks));
  const auto first = [&](const char* key, const char* value) {
    for (const auto& p : all)
      if (p[key] == value && (std::string(key) != "context_exchange" || p["context"].get<int>() > 1)) return p;
    FAIL("no plan has " << key << " = " << value);
    return nlohmann::json();
  };
  for (const auto& p : {first("schedule", "interleaved"), first("context_exchange", "ring")}) {
    CAPTURE(p["sharding"].get<std::string>());
    const std::string rank = std::to_string(p["rank"].get<int>());
    const auto emitted = inspect(run, with(four_blocks, {"--plan", "--devices", "4", "--rates", rates, "--emit", rank}));
    REQUIRE_MESSAGE(emitted.exit_code == 0, emitted.output);
    const std::string yaml = run.dir.file("plan-" + rank + ".yaml");
    write_file(yaml, emitted.output);
    const std::string out = run.dir.file("out-" + rank);
    const auto r = run_process({binary_path("spmd-train"), "--config", yaml, "--set", "output.dir=" + out}, {}, 300);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const auto summary = read_summary(out);
    if (p["context"].get<int>() > 1) {
      CHECK(summary["context_exchange"] == p["context_exchange"]);
      CHECK(summary["ring_attention_forwards"].get<int64_t>() > 0);
    }
    if (p["stage"].get<int>() > 1) {
      CHECK(summary["pipeline_schedule"] == p["schedule"]);
      if (p["schedule"] == "interleaved") CHECK(summary["pipeline_chunks"].get<int>() == 2);
    }
    check_same_curve(read_metrics(out + "/metrics.jsonl"), reference, kFloatRounding);
  }
}

TEST_CASE("plan: ranked by predicted step time, within the budget, and compute is the FLOPs over the rate") {
  TinyRun run;
  const std::string rates = rates_file(run);
  const nlohmann::json unbounded = plans(run, rates)["plans"];
  REQUIRE(unbounded.size() > 10);
  int64_t smallest = unbounded[0]["memory_bytes"].get<int64_t>(), largest = smallest;
  for (const auto& p : unbounded) {
    smallest = std::min(smallest, p["memory_bytes"].get<int64_t>());
    largest = std::max(largest, p["memory_bytes"].get<int64_t>());
  }
  REQUIRE(smallest < largest);
  const int64_t budget = (smallest + largest) / 2;
  const nlohmann::json fitting = plans(run, rates, {"--memory-per-device", std::to_string(budget)})["plans"];
  CHECK(fitting.size() < unbounded.size());
  for (size_t i = 0; i < fitting.size(); ++i) {
    CAPTURE(fitting[i]["sharding"].get<std::string>());
    CHECK(fitting[i]["memory_bytes"].get<int64_t>() <= budget);
    if (i > 0) CHECK(fitting[i]["step_s"].get<double>() >= fitting[i - 1]["step_s"].get<double>());
  }
  // Pure data parallelism without microbatches or remat: each device forwards and backwards B/4 rows.
  // The head multiplies the padded vocabulary: 72 ids padded to a multiple of 64.
  const double B = 8.0 / 4, T = 16, C = 32, L = 2, V = 128;
  const double flops = 3 * B * T * (L * (24 * C * C + 4 * T * C) + 2 * C * V);
  // Context parallelism over 4: each device holds a quarter of every row's positions, the same
  // tokens as DP4 (their queries attend over all T keys); per block the (B, T, 2C) keys and values
  // are gathered forward and their gradients reduce-scattered backward, each a ring over 4 devices
  // at the gathers' own rate (120 us, 0.5 GB/s), and the gradients are all-reduced over the
  // context axis.
  const double kv_bytes = 8 * T * 2 * C * 4, kv_ring = 120e-6 + 0.75 * kv_bytes / 0.5e9;
  // By ring: 9 of the 16 (chunk x chunk) attention blocks, 3.5 passes of them (the backward
  // replays the scores); per block 3 shifts of a member's keys and values forward, 3 of them and
  // 4 of their gradients backward, each a point-to-point step at the all-reduce link's rate
  // (80 us, 1.5 GB/s).
  const double core = 3 * B * T * L * 4 * T * C;
  const double ring_flops = flops - core + core * 9.0 / 16 * 3.5 / 3;
  const double shift = 80e-6 + kv_bytes / 4 / 1.5e9;
  int found = 0;
  for (const auto& p : unbounded) {
    if (p["microbatches"] != 1 || p["remat"] != "none") continue;
    if (p["context"] == 4 && p["context_exchange"] == "ring") {
      ++found;
      CHECK(p["sharding"] == "CP4-ring");
      CHECK(p["cost"]["flops"].get<double>() == doctest::Approx(ring_flops));
      CHECK(p["cost"]["comm_s"]["CP K/V ring (context)"].get<double>() == doctest::Approx(L * 10 * shift));
      continue;
    }
    if (p["data"] == 4) {
      ++found;
      CHECK(p["cost"]["flops"].get<double>() == doctest::Approx(flops));
      CHECK(p["cost"]["compute_s"].get<double>() == doctest::Approx(flops / 0.05e12));
      CHECK(p["cost"]["comm_s"].contains("grad all-reduce (data)"));
    }
    if (p["context"] == 4) {
      ++found;
      CHECK(p["sharding"] == "CP4");
      CHECK(p["cost"]["flops"].get<double>() == doctest::Approx(flops));
      CHECK(p["cost"]["comm_s"]["CP K/V gather/scatter (context)"].get<double>() == doctest::Approx(L * 2 * kv_ring));
      CHECK(p["cost"]["comm_s"].contains("grad all-reduce (context)"));
    }
  }
  CHECK(found == 3);
}

// train.optimizer muon: the plans count one momentum buffer per block matrix (AdamW two), the
// Newton-Schulz FLOPs of the busiest owner, and each matrix's broadcast from its owner (and, where
// sharded, its all-gather).
TEST_CASE("plan: under Muon, memory holds one buffer per matrix and the cost its Newton-Schulz and collectives") {
  TinyRun run;
  const std::string rates = rates_file(run);
  auto data4 = [](const nlohmann::json& all, const std::string& sharding) {
    for (const auto& p : all["plans"])
      if (p["sharding"] == sharding && p["microbatches"] == 1 && p["remat"] == "none") return p;
    FAIL("no plan " << sharding);
    return nlohmann::json();
  };
  const nlohmann::json adamw_all = plans(run, rates), muon_all = plans(run, rates, {"--set", "train.optimizer=muon"});
  const nlohmann::json adamw = data4(adamw_all, "DP4"), muon = data4(muon_all, "DP4");
  // Per block c_attn (96, 32), c_proj (32, 32), c_fc (128, 32), mlp.c_proj (32, 128): 12288 fp32
  // values, 2 blocks, whole on every data-parallel device.
  const double matrix_values = 2 * 12288;
  CHECK(adamw["memory"]["optimizer"].get<double>() - muon["memory"]["optimizer"].get<double>() == 4 * matrix_values);
  // Newton-Schulz, 5 steps of 4 r^2 c + 2 r^3 (r <= c): the 4 matrices of 32 x 128 (2949120 flops),
  // then c_attn's (2293760) and c_proj's (983040), largest first to the least loaded of 4 owners:
  // the busiest runs one 32 x 128 and one c_attn.
  const double busiest = 5 * (4 * 32.0 * 32 * 128 + 2 * 32.0 * 32 * 32) + 5 * (4 * 32.0 * 32 * 96 + 2 * 32.0 * 32 * 32);
  CHECK(muon["cost"]["flops"].get<double>() - adamw["cost"]["flops"].get<double>() == doctest::Approx(busiest));
  CHECK(muon["cost"]["compute_s"].get<double>() - adamw["cost"]["compute_s"].get<double>() ==
        doctest::Approx(busiest / 0.05e12));
  // Data parallelism gathers nothing; each of the 8 matrices is broadcast from its owner in
  // bfloat16 over the 4 ranks (80 us, 1.5 GB/s).
  auto muon_comm = [](const nlohmann::json& p) {
    for (const auto& [name, s] : p["cost"]["comm_s"].items())
      if (name.rfind("Muon gather/broadcast", 0) == 0) return s.get<double>();
    return 0.0;
  };
  CHECK(muon_comm(adamw) == 0);
  CHECK(muon_comm(muon) == doctest::Approx(8 * 80e-6 + 2 * matrix_values / 1.5e9));
  // FSDP-4 shards the matrices: each is all-gathered before its broadcast.
  const nlohmann::json fsdp = data4(muon_all, "FSDP4");
  CHECK(muon_comm(fsdp) > muon_comm(muon));
}

TEST_CASE("plan: an interleaved pipeline is costed over all of a stage's chunks, not its first") {
  // GPT-2 124M on 2 stages: 1F1B gives each stage one chunk of 6 blocks, interleaved:2 two chunks
  // of 3 (stage 0 blocks 0-2 and 6-8, stage 1 blocks 3-5 and 9-11 and the head), so the busiest
  // device computes the same FLOPs under both.
  const auto r = run_process({binary_path("spmd-inspect"), "--config", source_path("configs/gpt2-124m.yaml"), "--plan",
                              "--devices", "2", "--rates", source_path("configs/rates/example-gpu-node.json"), "--json",
                              "--top", "100000"},
                             {}, 120);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const nlohmann::json all = nlohmann::json::parse(r.output);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& p : all["plans"]) by_name[p["sharding"].get<std::string>()] = p;
  REQUIRE(by_name.count("PP2 1f1b M8") == 1);
  REQUIRE(by_name.count("PP2 interleaved:2 M8") == 1);
  const nlohmann::json& plain = by_name["PP2 1f1b M8"]["cost"];
  const nlohmann::json& interleaved = by_name["PP2 interleaved:2 M8"]["cost"];
  CHECK(interleaved["flops"].get<double>() == doctest::Approx(plain["flops"].get<double>()));
  CHECK(interleaved["compute_s"].get<double>() == doctest::Approx(plain["compute_s"].get<double>()));
  // Every chunk keeps its own input stream: no less elementwise traffic than one chunk of 6 blocks.
  CHECK(interleaved["memory_s"].get<double>() >= plain["memory_s"].get<double>());
  // A microbatch crosses 3 chunk boundaries instead of 1, each stage on all of them: per stage 6
  // transfers (3 streams and 3 gradients, sent or received) instead of 2.
  const std::string p2p = "stage send/receive (stage)";
  CHECK(interleaved["comm_s"][p2p].get<double>() == doctest::Approx(3 * plain["comm_s"][p2p].get<double>()));
  // The bubble: (p - 1) / v slots instead of p - 1, each a slot of the same stage work (more
  // sends and stream bytes make it a little longer).
  CHECK(interleaved["bubble_s"].get<double>() > 0.5 * plain["bubble_s"].get<double>());
  CHECK(interleaved["bubble_s"].get<double>() < 0.55 * plain["bubble_s"].get<double>());
}

TEST_CASE("plan: a budget nothing fits exits 2 and names the smallest footprint it found") {
  TinyRun run;
  const auto r = inspect(run, {"--plan", "--devices", "4", "--rates", rates_file(run), "--memory-per-device", "1KiB"});
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("none of the") != std::string::npos);
  CHECK(r.output.find("the smallest footprint is") != std::string::npos);
  CHECK(r.output.find("terminate") == std::string::npos);
}

TEST_CASE("plan: bad arguments and rates files exit 2 naming the culprit") {
  TinyRun run;
  const std::string rates = rates_file(run);
  const std::string broken = run.dir.file("broken.json");
  write_file(broken, R"({"memory_GBps": 10})");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--plan"}, "--devices"},
      {{"--plan", "--devices", "0", "--rates", rates}, "--devices"},
      {{"--plan", "--devices", "3", "--rates", rates}, "--devices 3"},
      {{"--plan", "--devices", "4", "--rates", rates, "--emit", "100000"}, "--emit 100000"},
      {{"--plan", "--devices", "4", "--rates", rates, "--top", "0"}, "--top"},
      {{"--plan", "--devices", "4", "--rates", rates, "--memory-per-device", "lots"}, "--memory-per-device"},
      {{"--plan", "--devices", "4", "--rates", rates, "--expert-load", "0.5"}, "--expert-load"},
      {{"--plan", "--devices", "4", "--rates", run.dir.file("missing.json")}, "--calibrate"},
      {{"--plan", "--devices", "4", "--rates", broken}, "matmul_TFLOPs"},
      {{"--plan", "--calibrate", "--devices", "4"}, "--calibrate"},
      {{"--emit", "1"}, "--plan"},
  };
  for (const auto& [args, culprit] : cases) {
    CAPTURE(args);
    const auto r = inspect(run, args);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find(culprit) != std::string::npos, r.output);
  }
}

TEST_CASE("calibrate: 2 worker processes measure rates that --plan then reads") {
  TinyRun run;
  const std::string rates = run.dir.file("measured.json");
  const auto r = inspect(run, {"--calibrate", "--devices", "2", "--rates", rates});
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const auto j = nlohmann::json::parse(read_file(rates));
  CHECK(j["devices"] == 2);
  CHECK(j["matmul_TFLOPs"].get<double>() > 0);
  CHECK(j["memory_GBps"].get<double>() > 0);
  CHECK(j["group_sizes"]["2"]["bandwidth_GBps"].get<double>() > 0);
  CHECK(j["group_sizes"]["2"]["latency_us"].get<double>() >= 0);
  CHECK(j["gather_group_sizes"]["2"]["bandwidth_GBps"].get<double>() > 0);
  CHECK(j["gather_group_sizes"]["2"]["latency_us"].get<double>() >= 0);
  CHECK(j["attention_TFLOPs"].get<double>() > 0);
  const auto planned = run_process({binary_path("spmd-inspect"), "--config", run.config, "--plan", "--devices", "2",
                                    "--rates", rates},
                                   {}, 60);
  CHECK_MESSAGE(planned.exit_code == 0, planned.output);
}

TEST_CASE("plan: docs/planner.md's GPT-2 124M commands answer, and the emitted config lays out") {
  TempDir dir;
  const std::vector<std::string> base{binary_path("spmd-inspect"), "--config", source_path("configs/gpt2-124m.yaml"),
                                      "--set", "runtime.device=cuda", "--plan", "--memory-per-device", "24GiB", "--rates",
                                      source_path("configs/rates/example-gpu-node.json")};
  const auto sweep = run_process(with(base, {"--devices", "1,2,4,8"}), {}, 120);
  REQUIRE_MESSAGE(sweep.exit_code == 0, sweep.output);
  CHECK(sweep.output.find("fewest devices that fit: ") != std::string::npos);
  const auto json = run_process(with(base, {"--devices", "1,2,4,8", "--json"}), {}, 120);
  REQUIRE_MESSAGE(json.exit_code == 0, json.output);
  const nlohmann::json sweep_json = nlohmann::json::parse(json.output);  // outlives the loop over its member
  for (const auto& n : sweep_json["by_devices"]) {
    CAPTURE(n["devices"]);
    for (const auto& p : n["plans"]) CHECK(p["memory_bytes"].get<int64_t>() <= int64_t{24} << 30);
  }
  const auto top = run_process(with(base, {"--devices", "2", "--top", "5"}), {}, 120);
  REQUIRE_MESSAGE(top.exit_code == 0, top.output);
  const auto emitted = run_process(with(base, {"--devices", "2", "--emit", "1"}), {}, 120);
  REQUIRE_MESSAGE(emitted.exit_code == 0, emitted.output);
  const std::string yaml = dir.file("gpt2-124m-planned.yaml");
  write_file(yaml, emitted.output);
  const auto loaded = run_process({binary_path("spmd-inspect"), "--config", yaml, "--json"}, {}, 60);
  REQUIRE_MESSAGE(loaded.exit_code == 0, loaded.output);
  CHECK(nlohmann::json::parse(loaded.output)["mesh"]["shape"].size() >= 1);
}

// Routed experts: the tiny llama with 8 experts, 2 per token, in both layers. Each token computes
// 2 of the 8 experts, on any layout; expert parallelism over the data axis sends each device's
// routed rows out and home by all-to-all (forward and backward) and spares the experts' gradient
// all-reduce and most of their optimizer traffic. With wide experts and a small batch it pays;
// with a large batch the all-to-alls cost more than it spares.
TEST_CASE("plan: expert parallelism counts k of E experts' FLOPs and its all-to-all bytes, and ranks first where it pays") {
  TinyRun run;
  const std::string rates = rates_file(run);
  const std::vector<std::string> moe{"--set", "model.arch=llama", "--set", "model.n_head=4", "--set",
                                     "model.n_kv_head=2", "--set", "model.tie_embeddings=false", "--set",
                                     "model.moe.num_experts=8", "--set", "model.moe.num_experts_per_tok=2", "--set",
                                     "model.moe.moe_intermediate_size=512"};
  auto plan_of = [](const nlohmann::json& all, const std::string& sharding) {
    for (const auto& p : all["plans"])
      if (p["sharding"] == sharding && p["microbatches"] == 1 && p["remat"] == "none") return p;
    FAIL("no plan " << sharding);
    return nlohmann::json();
  };
  const nlohmann::json small = plans(run, rates, moe);
  const nlohmann::json dp = plan_of(small, "DP4"), ep = plan_of(small, "DP4 EP4(data)");
  CHECK(ep["experts_on"] == "data");
  CHECK(plan_of(small, "DP2 EP2")["experts_on"] == "expert");
  // Per token and block, forward: q and o 2 x 32 x 32 each, k and v 2 x 32 x 16 each; the router
  // 2 x 32 x 8; 2 experts' SwiGLU, 3 products of 32 x 512 each; attention's core 4 T C. The head
  // 2 C V (the vocabulary padded to 128). DP4: 2 rows of 16 positions per device.
  const double tokens = 2 * 16, C = 32, T = 16, V = 128;
  const double block = 2 * (2 * C * C + 2 * C * 16) + 2 * C * 8 + 2 * 3 * 2 * C * 512 + 4 * T * C;
  const double flops = 3 * tokens * (2 * block + 2 * C * V);
  CHECK(dp["cost"]["flops"].get<double>() == doctest::Approx(flops));
  CHECK(ep["cost"]["flops"].get<double>() == doctest::Approx(flops));  // the same work, spread by expert
  // Per sparse layer, forward: 2 rows per token, 3/4 of them to the 3 other devices, out in fp32
  // and home in fp32; backward the same. 2 layers; each forward 3 latencies (the counts' gather and
  // 2 exchanges), each backward 2, at the 4-device link (80 us, 1.5 GB/s).
  const double bytes = 2 * 2 * (2 * tokens * C * 4 * 3 / 4 * 2);
  CHECK(dp["cost"]["all_to_all_bytes"].get<double>() == 0);
  CHECK(ep["cost"]["all_to_all_bytes"].get<double>() == doctest::Approx(bytes));
  CHECK(ep["cost"]["comm_s"]["EP all-to-all (data)"].get<double>() == doctest::Approx(2 * 5 * 80e-6 + bytes / 1.5e9));
  CHECK_FALSE(dp["cost"]["comm_s"].contains("EP all-to-all (data)"));
  // Each device holds 2 of each layer's 8 experts (3 x (8, 32, 512) fp32 per layer): 3/4 fewer.
  const double expert_bytes = 2 * 3 * 8 * 32 * 512 * 4;
  CHECK(dp["memory"]["params"].get<double>() - ep["memory"]["params"].get<double>() == expert_bytes * 3 / 4);
  CHECK(ep["rank"].get<int>() < dp["rank"].get<int>());
  // --expert-load: a fuller device's routed rows count in the memory an expert-parallel plan needs,
  // not in a plan whose devices compute their own tokens' rows; the predicted time stays balanced.
  const nlohmann::json loaded = plans(run, rates, with(moe, {"--expert-load", "2"}));
  CHECK(plan_of(loaded, "DP4 EP4(data)")["memory"]["activations"].get<double>() >
        ep["memory"]["activations"].get<double>());
  CHECK(plan_of(loaded, "DP4")["memory"]["activations"] == dp["memory"]["activations"]);
  CHECK(plan_of(loaded, "DP4 EP4(data)")["cost"]["total_s"] == ep["cost"]["total_s"]);
  // 512 times the batch: 64 routed rows per token's device become 32768, and the all-to-alls
  // outweigh the gradient all-reduce they spare.
  const nlohmann::json large = plans(run, rates, with(moe, {"--set", "data.batch_size=4096"}));
  const nlohmann::json dp_large = plan_of(large, "DP4"), ep_large = plan_of(large, "DP4 EP4(data)");
  CHECK(ep_large["cost"]["all_to_all_bytes"].get<double>() == doctest::Approx(512 * bytes));
  CHECK(dp_large["rank"].get<int>() < ep_large["rank"].get<int>());
}

// Tensor parallelism within the experts (`[mlp, model]` splits each expert's SwiGLU): forward, each
// token's k partial outputs are summed over the group, k streams where a dense MLP sums one;
// backward, the input's gradient, one stream. At the 2-device link (50 us, 2 GB/s), a ring
// all-reduce of b bytes takes 50 us + b / 2 GB/s, a gather or reduce-scatter 50 us + b / 4 GB/s.
TEST_CASE("plan: tensor parallelism within the experts sums each token's k outputs forward") {
  TinyRun run;
  const std::string rates = rates_file(run);
  auto moe = [](int per_token) {
    return std::vector<std::string>{"--set", "model.arch=llama", "--set", "model.n_head=4", "--set", "model.n_kv_head=2",
                                    "--set", "model.tie_embeddings=false", "--set", "model.moe.num_experts=8", "--set",
                                    "model.moe.num_experts_per_tok=" + std::to_string(per_token), "--set",
                                    "model.moe.moe_intermediate_size=512"};
  };
  auto tp_seconds = [](const nlohmann::json& all, const std::string& sharding, const std::string& entry) {
    for (const auto& p : all["plans"])
      if (p["sharding"] == sharding && p["microbatches"] == 1 && p["remat"] == "none") return p["cost"]["comm_s"][entry].get<double>();
    FAIL("no plan " << sharding);
    return 0.0;
  };
  const auto all_reduce = [](double bytes) { return 50e-6 + bytes / 2e9; };
  const auto gather = [](double bytes) { return 50e-6 + bytes / 4e9; };
  // DP2 TP2: 64 tokens per device, a stream of 64 x 32 fp32; 2 sparse blocks, each the attention's
  // reduction forward and backward; the embedding's and the head's input, the loss's three (64) sums.
  const double stream = 64 * 32 * 4, ends = 2 * all_reduce(stream) + 3 * all_reduce(64 * 4);
  for (const int k : {2, 4}) {
    CAPTURE(k);
    const nlohmann::json all = plans(run, rates, moe(k));
    const double experts = all_reduce(k * stream) + all_reduce(stream);
    CHECK(tp_seconds(all, "DP2 TP2", "TP all-reduce (model)") ==
          doctest::Approx(2 * (2 * all_reduce(stream) + experts) + ends));
    // Sequence parallel: each reduction a gather and a reduce-scatter; the experts gather the stream
    // and the choice (k int64 per token) and reduce-scatter the k outputs, and the reverse backward.
    const double pair = all_reduce(stream) + 50e-6;
    const double sp_experts = gather(stream) + gather(64.0 * k * 8) + 2 * gather(k * stream) + gather(stream);
    CHECK(tp_seconds(all, "DP2 TP2+SP", "TP gather/scatter (model)") ==
          doctest::Approx(2 * (2 * pair + sp_experts) + 2 * pair + 3 * all_reduce(64 * 4)));
  }
}
