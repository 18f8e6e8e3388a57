// The op census of one training step of the GPU's code path (runtime.cpu_kernels: generic, bf16
// products) on the tiny GPT-2 and Llama, in this process: the invariants a GPU step must keep.
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "census/census_summary.h"
#include "census/op_census.h"
#include "config/config.h"
#include "kernels/kernels.h"
#include "train/train_state.h"

#include "training_fixture.h"

#include "doctest_check.h"

using namespace spmd;

namespace {

// Launches in the head that touch a chunk of logits (forward and backward), per chunk, at most:
// measured 4 on both families: the product writing them, the loss kernel reading them and
// writing their gradient, the two products reading that (dx, and the table's gradient).
constexpr double kMaxLogitPasses = 4;

// The fused CPU kernels back on when a case ends (use_cpu_kernels is for the whole process).
struct FusedKernelsAfter {
  ~FusedKernelsAfter() { kernels::use_cpu_kernels(CpuKernels::kFused); }
};

// The census of the second step (the first makes the bf16 weight copies).
census::CensusSummary census_of_step(const test::TinyRun& run, std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), {"runtime.cpu_kernels=generic", "model.matmul_dtype=bfloat16"});
  const Config config = load_config(run.config, overrides);
  TrainState state = build_train_state(config, RendezvousInfo{}, true);
  train_step(state);
  census::OpCensus census;
  train_step(state);
  return census::summarize(census.finish(), census::gpu_spec("h100"), 0);
}

// Forward outputs in the blocks of dtype float32 and shape (rows..., width) with rows = n.
int64_t float_activations(const census::CensusSummary& sum, int64_t n, int64_t width) {
  int64_t found = 0;
  for (const census::ShapeCount& s : sum.block_outputs) {
    if (s.dtype != "Float" || s.shape.empty() || s.shape.back() != width) continue;
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < s.shape.size(); ++i) rows *= s.shape[i];
    if (rows == n) {
      MESSAGE("float32 activation ", s.where, " [", rows, ", ", width, "] x", s.count);
      found += s.count;
    }
  }
  return found;
}

void check_device_step(const census::CensusSummary& sum, int64_t mlp_width) {
  const int64_t n = 8 * 16;  // the tiny run's batch x block_size
  CHECK(sum.launches > 0);
  CHECK(sum.product_flops > 0);
  int64_t syncs = 0;
  for (const auto& [name, count] : sum.host_syncs) {
    MESSAGE("host sync ", name, " x", count);
    syncs += count;
  }
  CHECK(syncs == 0);  // the device path decides the update on the device
  CHECK(float_activations(sum, n, mlp_width) == 0);
  REQUIRE(sum.backward_ran);
  REQUIRE(sum.saved_bytes_by_dtype.count("BFloat16") == 1);
  CHECK(sum.saved_bytes_by_dtype.at("BFloat16") > 0);
  CHECK(sum.logits.width >= 72);  // the vocabulary, padded as the head pads it
  CHECK(sum.logits.chunks >= 1);
  MESSAGE("passes over each chunk of logits: ", sum.logits.per_chunk());
  CHECK(sum.logits.per_chunk() <= kMaxLogitPasses);
  bool blocks = false, head = false, optimizer = false;
  for (const census::RegionRow& r : sum.regions) {
    blocks = blocks || r.name == "block.1";
    head = head || r.name == "head";
    optimizer = optimizer || r.name == "optimizer";
  }
  CHECK(blocks);
  CHECK(head);
  CHECK(optimizer);
}

}  // namespace

TEST_CASE("census: a GPT-2 step on the device path: no host sync, no float32 (N, 4C), bounded logit passes") {
  FusedKernelsAfter restore;
  test::TinyRun run;
  check_device_step(census_of_step(run, {}), 4 * 32);
}

TEST_CASE("census: a Llama step on the device path: no host sync, no float32 (N, I), bounded logit passes") {
  FusedKernelsAfter restore;
  test::TinyRun run;
  check_device_step(census_of_step(run, {"model.arch=llama", "model.n_head=4", "model.n_kv_head=2",
                                         "model.intermediate_size=64", "model.tie_embeddings=false"}),
                    64);
}
