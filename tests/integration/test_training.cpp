// Distributed training as real processes over Gloo on loopback: every mesh's loss curve and
// initial parameters match the single-process run; torchrun-style launch matches the launcher.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ports.h"
#include "comm/backend.h"
#include "kernels/cuda_module.h"
#include "kernels/kernels.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("training: every mesh matches the single-process loss curve") {
  TinyRun run;
  for (const char* dropout : {"0.0", "0.1"}) {
    CAPTURE(dropout);
    Curve reference = train(run, run.dir.file(std::string("single-") + dropout), {"--set", std::string("model.dropout=") + dropout});
    REQUIRE(reference.loss.size() == 12);
    CHECK(reference.loss.back() < reference.loss.front());  // it learns
    for (const auto& mesh : kMeshes) {
      CAPTURE(mesh.name);
      auto args = mesh_args(mesh);
      args.insert(args.end(), {"--set", std::string("model.dropout=") + dropout});
      Curve curve = train(run, run.dir.file(mesh.name + "-" + dropout), args);
      check_same_curve(curve, reference, kFloatRounding);
    }
  }
}

TEST_CASE("training: gradient buckets all-reduced during backward give the same curve") {
  TinyRun run;
  Curve reference = train(run, run.dir.file("single"), {});
  auto args = mesh_args(test_mesh("hybrid-4x2"));
  for (const char* bucket_mb : {"0", "0.004"}) {  // one bucket after backward; ~1K floats each
    CAPTURE(bucket_mb);
    auto with_bucket = args;
    with_bucket.insert(with_bucket.end(), {"--set", std::string("runtime.grad_bucket_mb=") + bucket_mb});
    auto r = run_train(run, run.dir.file(std::string("bucket-") + bucket_mb), with_bucket);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const int buckets = read_summary(run.dir.file(std::string("bucket-") + bucket_mb))["gradient_buckets"].get<int>();
    if (std::string(bucket_mb) == "0") CHECK(buckets == 1);
    else CHECK(buckets > 5);
    // Every bucketed parameter's .grad lies inside its bucket (no second gradient-sized buffer).
    const auto summary = read_summary(run.dir.file(std::string("bucket-") + bucket_mb));
    CHECK(summary["gradient_bucket_bytes"].get<int64_t>() > 0);
    CHECK(summary["gradients_outside_buckets"].get<int64_t>() == 0);
    check_same_curve(read_metrics(run.dir.file(std::string("bucket-") + bucket_mb) + "/metrics.jsonl"), reference, kFloatRounding);
  }
}

TEST_CASE("training: microbatches on one process equal the whole-batch step") {
  // Gradient accumulation changes only the order of float sums: every step's loss (and the
  // evaluations) stay within 1e-5, dropout masks included, while the graph held for backward
  // shrinks to one microbatch's.
  TinyRun run;
  for (const std::string dropout : {"0.0", "0.1"}) {
    CAPTURE(dropout);
    const std::vector<std::string> with_dropout{"--set", "model.dropout=" + dropout};
    Curve whole = train(run, run.dir.file("m1-" + dropout), with_dropout);
    auto args = with_dropout;
    args.insert(args.end(), {"--set", "train.microbatches=4"});
    Curve split = train(run, run.dir.file("m4-" + dropout), args);
    MESSAGE("dropout " << dropout << ": microbatches 4 vs 1, max relative loss difference " << max_rel_diff(split, whole));
    check_same_curve(split, whole, 1e-5);
    const double graph_whole = read_summary(run.dir.file("m1-" + dropout))["graph_bytes"].get<double>();
    const double graph_split = read_summary(run.dir.file("m4-" + dropout))["graph_bytes"].get<double>();
    MESSAGE("graph bytes held for backward: microbatches 1: " << graph_whole << ", 4: " << graph_split);
    CHECK(graph_split < 0.5 * graph_whole);
  }
  // 8 sequences on one rank do not split into 3 microbatches: a usage error before any work.
  auto r = run_train(run, run.dir.file("m3"), {"--set", "train.microbatches=3"});
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("data.batch_size = 8") != std::string::npos, r.output);
  CHECK(r.output.find("train.microbatches = 3") != std::string::npos);
}

TEST_CASE("training: microbatches on DP x TP and FSDP meshes match the single process") {
  // [2,2]: 4 rows per data-parallel rank in 4 microbatches; FSDP-4: 2 rows in 2. Dropout masks are
  // drawn by global row, so they equal the single process's whole-batch masks. Each gradient
  // bucket is all-reduced once per step, during the last microbatch's backward; the FSDP
  // prefetcher sees M passes per step and must still change no number.
  TinyRun run;
  const TestMesh fsdp4{"fsdp-4", "[4]", "[fsdp]", test_mesh("fsdp-8").rules};
  const int64_t steps = 12;
  for (const std::string dropout : {"0.0", "0.1"}) {
    CAPTURE(dropout);
    const std::vector<std::string> with_dropout{"--set", "model.dropout=" + dropout};
    Curve reference = train(run, run.dir.file("single-" + dropout), with_dropout);
    struct Case { TestMesh mesh; std::string microbatches; std::vector<std::string> extra; };
    const std::vector<Case> cases{
        {{"hybrid-2x2", "[2,2]", "[data,model]", kTpRules}, "4", {"--set", "runtime.grad_bucket_mb=0.004"}},
        {fsdp4, "2", {}},
        {fsdp4, "2", {"--set", "runtime.fsdp_prefetch=false"}}};
    std::vector<Curve> curves;
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      CAPTURE(k);
      auto args = mesh_args(c.mesh);
      args.insert(args.end(), with_dropout.begin(), with_dropout.end());
      args.insert(args.end(), {"--set", "train.microbatches=" + c.microbatches});
      args.insert(args.end(), c.extra.begin(), c.extra.end());
      const std::string out = run.dir.file("case" + std::to_string(k) + "-" + dropout);
      curves.push_back(train(run, out, args));
      MESSAGE("case " << k << ", " << c.mesh.name << " microbatches " << c.microbatches << ", dropout " << dropout
                      << ": max relative loss difference to one process " << max_rel_diff(curves[k], reference));
      check_same_curve(curves[k], reference, kFloatRounding);
      const auto summary = read_summary(out);
      const int64_t buckets = summary["gradient_buckets"].get<int64_t>();
      MESSAGE(buckets << " gradient bucket(s), " << summary["gradient_all_reduces"] << " all-reduces, "
                      << summary["gradient_all_reduces_during_backward"] << " of them during backward");
      CHECK(buckets >= (k == 0 ? 5 : 1));
      CHECK(summary["gradient_all_reduces"].get<int64_t>() == steps * buckets);
      CHECK(summary["gradient_all_reduces_during_backward"].get<int64_t>() == steps * buckets);
      CHECK(summary["gradients_outside_buckets"].get<int64_t>() == 0);  // microbatches accumulated in the buckets
      if (k == 1)  // FSDP with prefetch: after the first pass, most unit gathers are started ahead
        CHECK(summary["fsdp_prefetched_gathers"].get<int64_t>() >= summary["fsdp_unit_gathers"].get<int64_t>() / 2);
    }
    // FSDP-4 with prefetch on and off: bit for bit.
    for (size_t i = 0; i < curves[1].loss.size(); ++i) CHECK(curves[1].loss[i] == curves[2].loss[i]);
    for (size_t i = 0; i < curves[1].val_loss.size(); ++i) CHECK(curves[1].val_loss[i] == curves[2].val_loss[i]);
  }
}

TEST_CASE("training: bfloat16 matmuls follow the single process on TP, DP and FSDP meshes") {
  // Every mesh rounds the same products to bfloat16, but a row-parallel layer rounds each partial
  // sum before the all-reduce: equal to bf16 rounding (2^-8), not bit for bit. The float32 curve
  // is the same model: it stays within a few bf16 roundings too.
  TinyRun run;
  const std::vector<std::string> bf16{"--set", "model.matmul_dtype=bfloat16"};
  Curve fp32 = train(run, run.dir.file("fp32"), {});
  Curve single = train(run, run.dir.file("bf16-single"), bf16);
  MESSAGE("bf16 vs fp32, one process: max relative loss difference " << max_rel_diff(single, fp32));
  check_same_curve(single, fp32, 2e-3);
  CHECK(std::abs(single.loss.back() - fp32.loss.back()) <= 1e-2);  // the final loss
  // The option is in effect where this CPU takes bf16 products (elsewhere float32 is kept).
  const bool bf16_here =
      spmd::kernels::matmul_operand_dtype(spmd::MatmulDtype::kBFloat16, c10::Device(c10::kCPU)) == at::kBFloat16;
  if (bf16_here) CHECK(max_rel_diff(single, fp32) > 0);
  else CHECK(max_rel_diff(single, fp32) == 0);  // float32 kept: the same run
  for (const auto& [name, shape, axes, rules] : {TestMesh{"hybrid-2x2", "[2,2]", "[data,model]", kTpRules},
                                                 TestMesh{"fsdp-4", "[4]", "[fsdp]", test_mesh("fsdp-8").rules}}) {
    CAPTURE(name);
    auto args = mesh_args({name, shape, axes, rules});
    args.insert(args.end(), bf16.begin(), bf16.end());
    Curve curve = train(run, run.dir.file("bf16-" + name), args);
    MESSAGE(name << " vs one process, both bf16: max relative loss difference " << max_rel_diff(curve, single));
    check_same_curve(curve, single, 1e-3);
  }
}

TEST_CASE("training: initialized global parameters are bit-identical on every mesh") {
  TinyRun run;
  auto dump = [&](const std::string& name, std::vector<std::string> args) {
    std::string dir = run.dir.file("init-" + name);
    args.insert(args.end(), {"--set", "train.steps=1", "--set", "train.eval_every=0"});
    auto r = run_train(run, run.dir.file("out-" + name), args, "dump_init=" + dir);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    return dir;
  };
  std::string reference = dump("single", {});
  size_t files = 0;
  for (const auto& mesh : kMeshes) {
    CAPTURE(mesh.name);
    std::string dir = dump(mesh.name, mesh_args(mesh));
    for (const auto& entry : std::filesystem::directory_iterator(reference)) {
      CAPTURE(entry.path().filename().string());
      std::string want = read_all(entry.path().string());
      CHECK(!want.empty());
      CHECK(read_all(dir + "/" + entry.path().filename().string()) == want);
      ++files;
    }
  }
  CHECK(files == kMeshes.size() * 28);  // every parameter: 2 layers x 12 + wte, wpe, ln_f.{weight,bias}
}

TEST_CASE("training: ranks started the torchrun way match the built-in launcher") {
  TinyRun run;
  const TestMesh mesh{"hybrid-2x2", "[2,2]", "[data,model]", kTpRules};
  Curve launched = train(run, run.dir.file("launcher"), mesh_args(mesh));
  const std::string port = unused_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  std::string out = run.dir.file("torchrun");
  for (int rank = 0; rank < 4; ++rank) {
    std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out};
    auto args = mesh_args(mesh);
    argv.insert(argv.end(), args.begin(), args.end());
    argvs.push_back(argv);
    envs.push_back({{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", std::to_string(rank)},
                    {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
                    {"OMP_NUM_THREADS", "1"}});
  }
  auto results = run_processes(argvs, envs, 300);
  for (const auto& r : results) REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  check_same_curve(read_metrics(out + "/metrics.jsonl"), launched, 1e-6);
}

TEST_CASE("training: every collective's gradient matches one-process autograd (4 real ranks)") {
  std::string port = std::to_string(20000 + ((getpid() + 7919) % 20000));
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int rank = 0; rank < 4; ++rank) {
    argvs.push_back({std::string(SPMD_BINARY_DIR) + "/tests/collectives_worker"});
    envs.push_back({{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port}});
  }
  auto results = run_processes(argvs, envs, 120);
  for (const auto& r : results) {
    CHECK_MESSAGE(r.exit_code == 0, r.output);
    CHECK(r.output.find("MISMATCH") == std::string::npos);
    // (5 functions x (forward, grad) + 3 FSDP layers x (forward + 2-3 grads) + fsdp_linear in bf16
    // (forward + 3 grads) + 5 FSDP units (values, gathers per pass, prefetched, 2 reduce-scatters)
    // + the chunked head vocab-parallel (forward, 2 grads, row losses) and under FSDP (forward, 2
    // grads) = 37) x 2 groups
    size_t oks = 0;
    for (size_t at = r.output.find("ok "); at != std::string::npos; at = r.output.find("ok ", at + 1)) ++oks;
    CHECK(oks == 74);
  }
}

TEST_CASE("training: FSDP-8 holds about 1/8 of the parameter, gradient and optimizer bytes per rank") {
  TinyRun run;
  auto state_bytes = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set",
                                  "output.dir=" + run.dir.file("mem"), "--set", "train.steps=1", "--set",
                                  "train.eval_every=0"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_process(argv, {}, 120);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    return read_summary(run.dir.file("mem"))["state_bytes_per_rank"].get<double>();
  };
  double single = state_bytes({});
  double fsdp = state_bytes(mesh_args(test_mesh("fsdp-8")));
  MESSAGE("params+grads+AdamW bytes per rank: 1 process " << single << ", FSDP-8 " << fsdp);
  CHECK(fsdp / single == doctest::Approx(1.0 / 8).epsilon(0.1));
}

TEST_CASE("training: FSDP frees gathered weights after use: its graph holds no more than data parallel's") {
  // Between forward and backward the autograd graph holds activations; a data-parallel rank's
  // weights are its own parameters, so they add nothing. FSDP must add nothing either: had it kept
  // the gathered weights for backward, its graph would hold (1 - 1/4) of the parameter bytes more.
  // The margin: Gloo's worker thread may not yet have dropped the last all-gather's buffers.
  TinyRun run;
  auto measure = [&](const std::string& name, const std::vector<std::string>& args) {
    std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set",
                                  "output.dir=" + run.dir.file(name), "--set", "train.steps=2", "--set",
                                  "train.eval_every=0", "--set", "model.n_embd=64"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_process(argv, {}, 120);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const auto summary = read_summary(run.dir.file(name));
    return std::make_pair(summary["graph_bytes"].get<double>(), summary["state_bytes_per_rank"].get<double>());
  };
  const double param_bytes = measure("single", {}).second / 4;  // params, grads, AdamW m and v
  const double dp = measure("dp", mesh_args({"dp-4", "[4,1]", "[data,model]", kTpRules})).first;
  const double fsdp = measure("fsdp", mesh_args({"fsdp-4", "[4]", "[fsdp]",
                                                 "[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], "
                                                 "[mlp, null], [seq, null], [kv, null]]"})).first;
  MESSAGE("graph bytes per rank: DP-4 " << dp << ", FSDP-4 " << fsdp << "; gathered weights would add "
                                        << param_bytes * 0.75);
  CHECK(dp > 0);
  CHECK(fsdp <= dp + 0.1 * param_bytes);
}

TEST_CASE("training: FSDP prefetch overlaps the next gather and changes no number") {
  // The prefetched gather is the same all-gather, started one unit (block) earlier: the curves
  // must be equal bit for bit, and after the first forward and backward (which record the order)
  // every unit's gather but a pass's first must have been started during the unit before.
  TinyRun run;
  auto args = mesh_args({"fsdp-4", "[4]", "[fsdp]", test_mesh("fsdp-8").rules});
  auto counts = [](const std::string& out) {
    const auto summary = read_summary(out);
    return std::make_pair(summary["fsdp_prefetched_gathers"].get<long>(), summary["fsdp_unit_gathers"].get<long>());
  };
  std::vector<Curve> curves;
  std::vector<std::pair<long, long>> served;
  for (const char* prefetch : {"true", "false"}) {
    auto with = args;
    with.insert(with.end(), {"--set", std::string("runtime.fsdp_prefetch=") + prefetch});
    const std::string out = run.dir.file(std::string("prefetch-") + prefetch);
    auto r = run_train(run, out, with);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    served.push_back(counts(out));
    curves.push_back(read_metrics(out + "/metrics.jsonl"));
  }
  // 12 steps (a forward and a backward each) and the evaluations' forwards, over 2 blocks. A
  // forward gathers 4 units (embeddings, 2 blocks, final norm and head), a backward 3 (the
  // embeddings' backward needs no weight). The first pass of each kind records the order; in
  // every later one each unit but the first is gathered ahead.
  const auto [ahead, gathers] = served[0];
  const long backwards = 12, forwards = (gathers - 3 * backwards) / 4;
  MESSAGE("prefetch on: " << ahead << " of " << gathers << " unit all-gathers started during the previous unit ("
                          << forwards << " forwards, " << backwards << " backwards)");
  CHECK((gathers - 3 * backwards) % 4 == 0);
  CHECK(forwards > backwards);  // the evaluations ran
  CHECK(gathers == served[1].second);
  CHECK(served[1].first == 0);
  CHECK(ahead == (forwards - 1) * 3 + (backwards - 1) * 2);
  REQUIRE(curves[0].loss.size() == curves[1].loss.size());
  REQUIRE(curves[0].val_loss.size() == curves[1].val_loss.size());
  for (size_t i = 0; i < curves[0].loss.size(); ++i) CHECK(curves[0].loss[i] == curves[1].loss[i]);
  for (size_t i = 0; i < curves[0].val_loss.size(); ++i) CHECK(curves[0].val_loss[i] == curves[1].val_loss[i]);
}

TEST_CASE("training: FSDP issues one all-gather and one reduce-scatter per block, not per weight") {
  // Counted by the comm layer over the last training step (summary.json). Per microbatch: the
  // forward gathers the embeddings' unit, each block, and the final norm and head's unit (the
  // same unit: released in between, so gathered twice), and the loss reduce-scatters the head
  // table's gradient (made in its forward); the backward gathers the head's unit (GPT-2's final
  // LayerNorm; Llama's RMSNorm keeps its scale) and each block (the embedding's backward needs no
  // weight), and reduce-scatters each block's gradients and the embeddings' once. Full
  // recomputation issues the same: a recomputed block gathers once, in the backward's order, and
  // nothing is gathered ahead for it at the forward's end. Per weight it would be 10 all-gathers a
  // GPT-2 block.
  TinyRun run;
  const int64_t blocks = 2;  // TinyRun's n_layer
  struct Case {
    std::string name;
    std::vector<std::string> args;
    int64_t microbatches, backward_gathers;
  };
  const std::vector<Case> cases{{"gpt2", {}, 1, blocks + 1},
                                {"gpt2-microbatches", {"--set", "train.microbatches=2"}, 2, blocks + 1},
                                {"gpt2-remat-full", {"--set", "runtime.remat=full"}, 1, blocks + 1},
                                {"llama", kTinyLlama, 1, blocks}};
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto args = mesh_args({"fsdp-4", "[4]", "[fsdp]", test_mesh("fsdp-8").rules});
    args.insert(args.end(), c.args.begin(), c.args.end());
    const std::string out = run.dir.file("fsdp-" + c.name);
    Curve curve = train(run, out, args);
    check_same_curve(curve, train(run, out + "-single", c.args), kFloatRounding);
    const auto collectives = read_summary(out)["collectives_last_step"];
    MESSAGE("last step: " << collectives.dump());
    CHECK(collectives["all_gather"].get<int64_t>() == c.microbatches * ((blocks + 2) + c.backward_gathers));
    CHECK(collectives["reduce_scatter"].get<int64_t>() == c.microbatches * (blocks + 2));
  }
}

TEST_CASE("training: a CUDA build's ranks map the CUDA libraries only on a host with a GPU device node") {
  // The dynamic loader's own record (LD_DEBUG=files, one file per process): what each process of a
  // 2-rank run (the launcher and both ranks) loaded.
  TinyRun run;
  const std::string log = run.dir.file("ld");
  auto r = run_process({binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + run.dir.file("out"),
                        "--set", "mesh.shape=[2,1]", "--set", "train.steps=2"},
                       {{"LD_DEBUG", "files"}, {"LD_DEBUG_OUTPUT", log}}, 300);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  const bool gpu_host = spmd::cuda::gpu_device_node_present();
  CHECK(contains(r.output, spmd::built_with_cuda() ? (gpu_host ? "this build has CUDA (loaded)" : "this build has CUDA (not loaded")
                                                   : "this build lacks CUDA"));
  int processes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(run.dir.path())) {
    if (entry.path().filename().string().rfind("ld.", 0) != 0) continue;
    const std::string record = read_all(entry.path().string());
    if (!contains(record, "libtorch_cpu.so")) continue;  // a helper the launcher ran, not spmd-train
    ++processes;
    CAPTURE(entry.path().string());
    const bool cuda_mapped = contains(record, "libtorch_cuda.so") || contains(record, "libnccl.so");
    CHECK(cuda_mapped == (spmd::built_with_cuda() && gpu_host));
  }
  CHECK(processes >= 3);
}
