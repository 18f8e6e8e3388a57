// Training on a GPU as real processes: the tiny model on CUDA follows one CPU process. Where no
// GPU is visible (or the build has no CUDA) each case prints "SKIP: no GPU" and ctest reports it
// skipped (tests/CMakeLists.txt), never passed.
#include <doctest/doctest.h>

#include "comm/backend.h"
#include "skip_without_gpu.h"
#include "training_fixture.h"

using namespace spmd::test;

namespace {

const std::vector<std::string> kCpu{"--set", "runtime.device=cpu", "--set", "runtime.backend=gloo"};
// Compared with fp32 CPU numbers: full fp32 products (runtime.tf32 is on by default on CUDA).
const std::vector<std::string> kCudaNccl{"--set", "runtime.device=cuda", "--set", "runtime.backend=nccl",
                                         "--set", "runtime.tf32=false"};
// NCCL refuses two ranks on one device: under backend auto, ranks sharing the one GPU talk over Gloo
// (CUDA tensors), and summary.json names it.
const std::vector<std::string> kCudaAuto{"--set", "runtime.device=cuda", "--set", "runtime.backend=auto",
                                         "--set", "runtime.tf32=false"};
const std::vector<std::string> kBf16{"--set", "model.matmul_dtype=bfloat16"};

const TestMesh kHybrid2x2{"hybrid-2x2", "[2,2]", "[data,model]", kTpRules};
TestMesh fsdp(int n) { return {"fsdp-" + std::to_string(n), "[" + std::to_string(n) + "]", "[fsdp]", test_mesh("fsdp-8").rules}; }
}  // namespace

// A [1,1] mesh runs as one process with no process group (test_nccl_group.cpp builds one):
// this is the CUDA-vs-CPU check of the model, the kernels and the optimizer.
TEST_CASE("cuda: one CUDA process follows one CPU process to float32 tolerance") {
  if (skip_without_gpu()) return;
  TinyRun run;
  for (const char* dropout : {"0.0", "0.1"}) {
    CAPTURE(dropout);
    const std::vector<std::string> d{"--set", std::string("model.dropout=") + dropout};
    Curve cpu = train(run, run.dir.file(std::string("cpu-") + dropout), with(kCpu, d));
    Curve gpu = train(run, run.dir.file(std::string("gpu-") + dropout), with(kCudaNccl, d));
    MESSAGE("dropout " << dropout << ": 1 CUDA rank vs 1 CPU process, max relative loss difference " << max_rel_diff(gpu, cpu));
    check_same_curve(gpu, cpu, 2e-4);
  }
}

TEST_CASE("cuda: 2 and 4 ranks sharing the GPU under backend auto run Gloo and follow one CPU process on [2,2] and FSDP") {
  if (skip_without_gpu()) return;
  TinyRun run;
  Curve cpu = train(run, run.dir.file("cpu"), kCpu);
  for (const TestMesh& mesh : {kHybrid2x2, fsdp(2), fsdp(4)}) {
    CAPTURE(mesh.name);
    const std::string out = run.dir.file("gpu-" + mesh.name);
    Curve gpu = train(run, out, with(mesh_args(mesh), kCudaAuto));
    MESSAGE(mesh.name << " on CUDA vs 1 CPU process: max relative loss difference " << max_rel_diff(gpu, cpu));
    check_same_curve(gpu, cpu, 2e-4);
    CHECK(read_summary(out)["backend"] == "gloo");
  }
}

TEST_CASE("cuda: 2 pipeline stages on one GPU, hand-overs through pinned host memory, follow one CPU process") {
  if (skip_without_gpu()) return;
  TinyRun run;
  Curve cpu = train(run, run.dir.file("cpu"), kCpu);
  const TestMesh stages{"stage-2", "[2]", "[stage]",
                        "[[batch, null], [layers, stage], [vocab, null], [heads, null], [mlp, null], [embed, null], "
                        "[seq, null], [kv, null]]"};
  const std::string out = run.dir.file("gpu-stage-2");
  Curve gpu = train(run, out, with(with(mesh_args(stages), kCudaAuto), {"--set", "train.microbatches=2"}));
  MESSAGE("2 stages on CUDA vs 1 CPU process: max relative loss difference " << max_rel_diff(gpu, cpu));
  check_same_curve(gpu, cpu, 2e-4);
  CHECK(read_summary(out)["pipeline_stages"] == 2);
}

TEST_CASE("cuda: TF32 is on by default, named in summary.json, and keeps the loss near full fp32") {
  if (skip_without_gpu()) return;
  TinyRun run;
  const std::vector<std::string> cuda{"--set", "runtime.device=cuda", "--set", "runtime.backend=nccl"};
  Curve fp32 = train(run, run.dir.file("fp32"), with(cuda, {"--set", "runtime.tf32=false"}));
  Curve tf32 = train(run, run.dir.file("tf32"), cuda);
  CHECK(read_summary(run.dir.file("tf32"))["tf32"] == true);
  CHECK(read_summary(run.dir.file("fp32"))["tf32"] == false);
  MESSAGE("TF32 vs full fp32 on CUDA: max relative loss difference " << max_rel_diff(tf32, fp32));
  check_same_curve(tf32, fp32, 1e-2);
}

TEST_CASE("cuda: bfloat16 matmuls on CUDA stay within bf16 tolerance of one CPU process") {
  if (skip_without_gpu()) return;
  TinyRun run;
  Curve cpu = train(run, run.dir.file("cpu"), kCpu);
  Curve cpu_bf16 = train(run, run.dir.file("cpu-bf16"), with(kCpu, kBf16));
  Curve one = train(run, run.dir.file("gpu-bf16"), with(kCudaNccl, kBf16));
  MESSAGE("bf16, 1 CUDA rank vs fp32 CPU: " << max_rel_diff(one, cpu) << ", vs bf16 CPU: " << max_rel_diff(one, cpu_bf16));
  check_same_curve(one, cpu, 1e-2);
  CHECK(max_rel_diff(one, cpu) > 0);  // bf16 is in effect on the GPU
  for (const TestMesh& mesh : {kHybrid2x2, fsdp(4)}) {
    CAPTURE(mesh.name);
    Curve gpu = train(run, run.dir.file("gpu-bf16-" + mesh.name), with(mesh_args(mesh), with(kCudaAuto, kBf16)));
    MESSAGE(mesh.name << " bf16 on CUDA vs fp32 CPU: max relative loss difference " << max_rel_diff(gpu, cpu));
    check_same_curve(gpu, cpu, 1e-2);
  }
}
