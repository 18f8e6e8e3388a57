// Host-device crossings on a GPU: checkpoint staging and pipeline hand-overs go through pinned
// buffers, every copy queued on the stream and one wait for all of them; and runtime.tf32 sets
// cuBLAS's fp32 products to TF32 or full fp32. Skipped where no GPU is visible.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "ckpt/staging_buffer.h"
#include "comm/backend.h"
#include "comm/host_copies.h"

#include "doctest_check.h"
#include "skip_without_gpu.h"

using namespace spmd;
using spmd::test::skip_without_gpu;

namespace {
const c10::Device kGpu(c10::kCUDA, 0);
}

TEST_CASE("cuda host copies: checkpoint staging copies every GPU tensor into pinned memory with one wait") {
  if (skip_without_gpu()) return;
  at::manual_seed(4);
  std::vector<NamedTensor> live;
  for (int i = 0; i < 12; ++i) live.push_back({"w" + std::to_string(i), at::randn({256 + i, 64}).to(kGpu)});
  StagingBuffer buffer;
  for (int save = 0; save < 2; ++save) {
    CAPTURE(save);
    const StagedTensors staged = buffer.stage(live);
    CHECK(staged.copies == 12);
    CHECK(staged.device_waits == 1);  // one wait for the twelve copies, not one each
    for (size_t i = 0; i < live.size(); ++i) {
      CHECK(staged.tensors[i].tensor.is_pinned());
      CHECK(at::equal(staged.tensors[i].tensor, live[i].tensor.cpu()));
    }
    for (auto& t : live) t.tensor.mul_(-1.0);  // the next save must copy the new values
  }
}

TEST_CASE("cuda host copies: a hand-over's host buffer is pinned and its copies down and up are queued") {
  if (skip_without_gpu()) return;
  const at::Tensor x = at::randn({4, 16, 32}).to(kGpu);
  at::Tensor host = host_buffer(x.sizes(), x.scalar_type(), kGpu);
  CHECK(host.is_pinned());
  QueuedCopies down;
  down.copy(host, x);
  down.wait();
  CHECK(down.waits() == 1);
  CHECK(at::equal(host, x.cpu()));
  const at::Tensor back = host.to(kGpu, /*non_blocking=*/true);  // what StageLink::receive hands on
  CHECK(at::equal(back, x));
}

TEST_CASE("cuda: runtime.tf32 puts fp32 products on TF32 by default and false keeps them full fp32") {
  if (skip_without_gpu()) return;
  at::manual_seed(5);
  const at::Tensor a = at::randn({512, 512}), b = at::randn({512, 512});
  const at::Tensor exact = at::mm(a.to(at::kDouble), b.to(at::kDouble));
  for (const bool tf32 : {true, false}) {
    CAPTURE(tf32);
    RuntimeConfig config;
    config.device = "cuda";
    config.backend = "gloo";
    config.tf32 = tf32;
    const ResolvedRuntime runtime = resolve_runtime(config);
    CHECK(runtime.tf32 == tf32);
    CHECK(runtime.reason.find(tf32 ? "TF32 tensor cores" : "full fp32") != std::string::npos);
    rank_device(runtime, 0);
    const auto precision = at::globalContext().float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL);
    CHECK((precision == (tf32 ? at::Float32Precision::TF32 : at::Float32Precision::IEEE)));
    const double error =
        ((at::mm(a.to(kGpu), b.to(kGpu)).cpu().to(at::kDouble) - exact).abs().max() / exact.abs().max()).item<double>();
    MESSAGE("tf32 " << tf32 << ": largest error of a 512^3 fp32 product, relative to its largest entry: " << error);
    if (!tf32) CHECK(error < 1e-5);  // fp32 rounding; TF32's 10-bit mantissa gives ~1e-3 (Ampere and later)
  }
}
