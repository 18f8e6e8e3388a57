// The GPU's code path on a CPU (runtime.cpu_kernels: generic): libtorch's device-generic ops,
// bf16 products, SDPA, at::_fused_adamw_ and the update decided on the device, as a GPU runs
// them, trained here and checked against the CPU's own fused path. Stale bf16 weights (an update
// the weight cache does not see) or any other divergence of the two paths shows in the curves.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "training_fixture.h"

using namespace spmd::test;

namespace {

const std::vector<std::string> kGeneric{"--set", "runtime.cpu_kernels=generic"};
const std::vector<std::string> kBf16{"--set", "model.matmul_dtype=bfloat16"};
// No evaluation before the end: an evaluation casts the weights again under no_grad and would
// hide weights that went stale during training.
const std::vector<std::string> kNoEvalUntilEnd{"--set", "train.eval_every=12"};

// The generic path against the fused one for one model: float32 to float reassociation, bf16
// within bf16 rounding of float32, and a data-parallel x tensor-parallel mesh on the generic path
// following its own single process.
void check_generic_path(const std::vector<std::string>& model) {
  TinyRun run;
  const auto base = with(model, kNoEvalUntilEnd);
  const Curve fused = train(run, run.dir.file("fused-fp32"), base);
  const Curve generic = train(run, run.dir.file("generic-fp32"), with(base, kGeneric));
  MESSAGE("generic vs fused, float32: max relative loss difference " << max_rel_diff(generic, fused));
  check_same_curve(generic, fused, 1e-5);

  const Curve generic_bf16 = train(run, run.dir.file("generic-bf16"), with(with(base, kGeneric), kBf16));
  MESSAGE("generic bf16 vs fused float32: max relative loss difference " << max_rel_diff(generic_bf16, fused));
  CHECK(max_rel_diff(generic_bf16, fused) > 0);  // the products really ran in bf16
  check_same_curve(generic_bf16, fused, 2e-3);
  CHECK(generic_bf16.loss.back() < generic_bf16.loss.front() - 0.05);  // it trained

  const std::string kSequenceParallel =
      "[[batch, data], [seq, model], [vocab, model], [heads, model], [mlp, model], [embed, null], [kv, null]]";
  for (const auto& [name, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"[2,2]", mesh_args("[2,2]", "[data,model]", kTpRules)},
           {"[1,2] sequence parallel", mesh_args("[1,2]", "[data,model]", kSequenceParallel)}}) {
    CAPTURE(name);
    const Curve mesh = train(run, run.dir.file("generic-bf16-" + std::to_string(name.size())),
                             with(with(with(base, kGeneric), kBf16), args));
    MESSAGE("generic bf16 on " << name << " vs one process: max relative loss difference " << max_rel_diff(mesh, generic_bf16));
    check_same_curve(mesh, generic_bf16, 1e-3);
  }
}

}  // namespace

TEST_CASE("generic path: GPT-2 on the GPU's code path follows the fused CPU path (float32 exactly, bf16 within rounding)") {
  check_generic_path({});
}

TEST_CASE("generic path: Llama on the GPU's code path follows the fused CPU path (float32 exactly, bf16 within rounding)") {
  check_generic_path(kTinyLlama);
}

TEST_CASE("generic path: the runtime line says the CPU runs the GPU's code path") {
  TinyRun run;
  const auto r = run_train(run, run.dir.file("line"), with(with(kGeneric, kBf16), {"--set", "train.steps=1"}));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(r.output.find("CPU kernels generic") != std::string::npos);
}
