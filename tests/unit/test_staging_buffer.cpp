// The asynchronous checkpoint's host staging (ckpt/staging_buffer.h) and the queued copies under
// it (comm/host_copies.h) on the CPU: every tensor copied, the copies independent of the live
// tensors, the buffers reused by the next save, and no device to wait on. The GPU side (pinned
// buffers, every copy queued, one wait) is tests/gpu/test_gpu_host_copies.cpp.
#include <doctest/doctest.h>

#include <ATen/ATen.h>

#include "ckpt/staging_buffer.h"
#include "comm/host_copies.h"

using namespace spmd;

TEST_CASE("checkpoint staging: every tensor copied on the CPU with no device wait, into buffers the next save reuses") {
  at::manual_seed(3);
  std::vector<NamedTensor> live{{"wte", at::randn({72, 32})}, {"ln_f.bias", at::randn({32})},
                                {"h.0.attn.c_attn.weight", at::randn({32, 96}).t()}};  // a non-contiguous view too
  StagingBuffer buffer;
  const StagedTensors first = buffer.stage(live);
  CHECK(first.copies == 3);
  CHECK(first.device_waits == 0);  // nothing crossed to or from a device
  REQUIRE(first.tensors.size() == live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    CHECK(first.tensors[i].name == live[i].name);
    CHECK(at::equal(first.tensors[i].tensor, live[i].tensor));
    CHECK_FALSE(first.tensors[i].tensor.is_pinned());  // pinned memory only for a GPU's tensors
  }
  // Training goes on changing the live tensors: the staged copies keep the saved step's values.
  const at::Tensor saved = first.tensors[0].tensor.clone();
  live[0].tensor.add_(1.0);
  CHECK(at::equal(first.tensors[0].tensor, saved));
  // The next save writes into the same host memory.
  const StagedTensors second = buffer.stage(live);
  CHECK(second.copies == 3);
  CHECK(second.tensors[0].tensor.data_ptr() == first.tensors[0].tensor.data_ptr());
  CHECK(at::equal(second.tensors[0].tensor, live[0].tensor));
  CHECK(buffer.bytes() == (72 * 32 + 32 + 32 * 96) * 4);
}

TEST_CASE("host copies: CPU tensors need ordinary memory and no wait, however many copies are queued") {
  QueuedCopies queued;
  std::vector<at::Tensor> from, to;
  for (int64_t n : {5, 17, 1024}) {
    from.push_back(at::arange(n, at::kFloat));
    to.push_back(host_buffer({n}, at::kFloat, c10::Device(c10::kCPU)));
    CHECK_FALSE(to.back().is_pinned());
    queued.copy(to.back(), from.back());
  }
  queued.wait();
  CHECK(queued.copies() == 3);
  CHECK(queued.waits() == 0);
  for (size_t i = 0; i < from.size(); ++i) CHECK(at::equal(to[i], from[i]));
}
