// The GPU kernels' source compiles under NVRTC, with no GPU: libnvrtc runs on the host (the torch
// wheel ships it), so a typo in a kernel or in the header it shares with the CPU
// (kernels/counter_hash.h) fails here, on every CUDA build, not first on a GPU host.
#include <string>
#include <vector>

#include "util/error.h"
#ifdef SPMD_WITH_CUDA
#include "kernels/cuda/counter_dropout.h"
#include "kernels/cuda/pointwise.h"
#include "kernels/cuda/residual_norm.h"
#include "kernels/cuda/softmax_cross_entropy.h"
#endif

#include "doctest_check.h"

#include "skip.h"

// Skips the test where this build has no CUDA or this host cannot load libnvrtc.
#ifdef SPMD_WITH_CUDA
#define SKIP_WITHOUT_NVRTC()                                                          \
  do {                                                                                \
    const std::string why = spmd::kernels::cuda::nvrtc_unavailable();                 \
    if (!why.empty()) SPMD_SKIP(why);                                                 \
  } while (0)
#else
#define SKIP_WITHOUT_NVRTC() SPMD_SKIP("built without CUDA (" SPMD_CUDA_OFF_REASON "): no NVRTC kernels")
#endif

#ifdef SPMD_WITH_CUDA
namespace {
// The source compiles to PTX for sm_80 and sm_90 (A100, H100 / H200) with each of its entries.
void check_compiles(const spmd::kernels::cuda::NvrtcSource& source, const std::vector<std::string>& entries) {
  for (const std::string arch : {"80", "90"}) {
    CAPTURE(arch);
    const std::string ptx = spmd::kernels::cuda::nvrtc_compile(source, "compute_" + arch);
    CHECK(ptx.find(".target sm_" + arch) != std::string::npos);
    for (const std::string& entry : entries) CHECK(ptx.find(".entry " + entry + "(") != std::string::npos);
  }
}
}  // namespace
#endif

TEST_CASE("nvrtc: every kernel of our own compiles to PTX for compute_80 and compute_90 without a GPU") {
  SKIP_WITHOUT_NVRTC();
#ifdef SPMD_WITH_CUDA
  using namespace spmd::kernels::cuda;
  SUBCASE("the dropout mask") { check_compiles(counter_dropout_source(), {"spmd_counter_dropout_mask"}); }
  SUBCASE("the LM head's softmax cross-entropy") {
    check_compiles(softmax_cross_entropy_source(), {"spmd_softmax_cross_entropy"});
  }
  SUBCASE("the residual add + norm, forward and backward") {
    check_compiles(residual_norm_source(), {"spmd_residual_norm_forward", "spmd_residual_norm_backward"});
  }
  SUBCASE("rotary and SwiGLU") {
    check_compiles(pointwise_source(), {"spmd_rotary", "spmd_swiglu_forward", "spmd_swiglu_backward"});
  }
#endif
}

TEST_CASE("nvrtc: a GPU's architecture, a binary where NVRTC knows it, else PTX for the newest below") {
  SKIP_WITHOUT_NVRTC();
#ifdef SPMD_WITH_CUDA
  using namespace spmd::kernels::cuda;
  CHECK(nvrtc_architecture(9, 0) == "sm_90");                 // an H100 / H200
  const std::string future = nvrtc_architecture(99, 9);       // a GPU newer than this NVRTC
  CHECK(future.rfind("compute_", 0) == 0);
  CHECK(std::stoi(future.substr(8)) >= 90);
  CHECK_THROWS_AS(nvrtc_architecture(1, 0), spmd::RuntimeError);  // older than any it knows
#endif
}

TEST_CASE("nvrtc: a kernel that does not compile fails with NVRTC's log, naming the source") {
  SKIP_WITHOUT_NVRTC();
#ifdef SPMD_WITH_CUDA
  using namespace spmd::kernels::cuda;
  NvrtcSource broken = counter_dropout_source();
  broken.name = "broken.cuh";
  broken.text += "\nextern \"C\" __global__ void spmd_broken(float* out) { out[0] = undeclared_name; }\n";
  try {
    nvrtc_compile(broken, "compute_80");
    FAIL("a kernel with an undeclared name compiled");
  } catch (const spmd::RuntimeError& e) {
    const std::string message = e.what();
    CHECK(message.find("could not compile broken.cuh for compute_80") != std::string::npos);
    CHECK(message.find("undeclared_name") != std::string::npos);  // the compile log itself
  }
#endif
}
