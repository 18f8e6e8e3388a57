// NCCL itself, on the one GPU a test host has: a one-rank ProcessGroupNCCL (the [1,1] training
// run takes the single-process path and never builds one) runs every collective spmd's Group calls
// on a device group: all-reduce, all-gather and reduce-scatter through the flat calls, broadcast and
// barrier (pipeline hand-overs and the control group's collectives go over Gloo); and the auto
// backend's GPU check.
#include <chrono>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "comm/backend.h"
#include "comm/backend_factory.h"

#include "doctest_check.h"
#include "skip_without_gpu.h"

using namespace spmd;
using spmd::test::skip_without_gpu;

TEST_CASE("nccl: a one-rank ProcessGroupNCCL all-reduces, all-gathers, reduce-scatters and broadcasts CUDA tensors") {
  if (skip_without_gpu()) return;
  const c10::Device gpu(c10::kCUDA, 0);
  auto backend = make_backend("nccl", c10::make_intrusive<c10d::HashStore>(), 0, 1, std::chrono::seconds(60), "");
  const at::Tensor values = at::arange(24, at::TensorOptions().dtype(at::kFloat).device(gpu)).reshape({4, 6});

  std::vector<at::Tensor> reduced{values.clone()};
  backend->allreduce(reduced)->wait();
  CHECK(at::equal(reduced[0].cpu(), values.cpu()));  // one rank: the sum is the tensor

  at::Tensor input = values.clone(), gathered = at::empty({1, 4, 6}, values.options());
  backend->_allgather_base(gathered, input)->wait();
  CHECK(at::equal(gathered[0].cpu(), values.cpu()));

  at::Tensor scattered = at::empty({4, 6}, values.options()), whole = values.clone().unsqueeze(0);
  backend->_reduce_scatter_base(scattered, whole)->wait();
  CHECK(at::equal(scattered.cpu(), values.cpu()));
  std::vector<at::Tensor> broadcast{values.clone()};
  c10d::BroadcastOptions from_zero;
  from_zero.rootRank = 0;
  backend->broadcast(broadcast, from_zero)->wait();
  CHECK(at::equal(broadcast[0].cpu(), values.cpu()));
  backend->barrier()->wait();
}

TEST_CASE("nccl: two local ranks on this host's GPU(s): auto keeps NCCL only with a GPU each") {
  if (skip_without_gpu()) return;
  const std::string first = gpu_identity(c10::Device(c10::kCUDA, 0));
  MESSAGE("GPU 0 is " << first);
  CHECK(first.find("0000") != std::string::npos);  // a PCI bus id, not the index fallback
  ResolvedRuntime auto_nccl;
  auto_nccl.device = "cuda";
  auto_nccl.backend = "nccl";
  CHECK(settle_backend_for_gpus(auto_nccl, {first, first}).backend == "gloo");
  if (visible_gpus() > 1)
    CHECK(settle_backend_for_gpus(auto_nccl, {first, gpu_identity(c10::Device(c10::kCUDA, 1))}).backend == "nccl");
}
