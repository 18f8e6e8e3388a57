// install_caching_cpu_allocator: large blocks come back from the free list, small and empty ones
// work, raw_allocate/raw_deallocate work, and tensors compute as before.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include "util/caching_cpu_allocator.h"

#include "doctest_check.h"

using namespace spmd;

TEST_CASE("caching CPU allocator: reuse, small, empty and raw blocks") {
  at::Tensor before = at::ones({1 << 20});  // allocated by libtorch's allocator, freed after install
  install_caching_cpu_allocator();
  install_caching_cpu_allocator();  // idempotent

  const void* first = nullptr;
  {
    at::Tensor big = at::empty({3 << 20});  // 12 MiB
    first = big.data_ptr();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
  }
  auto stats = caching_cpu_allocator_stats();
  CHECK(stats.cached_bytes >= (12 << 20));
  {
    at::Tensor again = at::empty({3 << 20});  // same rounded size: the same block
    CHECK(again.data_ptr() == first);
    CHECK(caching_cpu_allocator_stats().cache_hits == stats.cache_hits + 1);
  }
  at::Tensor small = at::arange(10, at::kFloat);
  CHECK(small.sum().item<float>() == 45.f);
  at::Tensor empty = at::empty({0});
  CHECK(empty.numel() == 0);
  before = at::Tensor();  // its own (default) deleter runs

  c10::Allocator* allocator = c10::GetCPUAllocator();
  for (size_t n : {size_t{1}, size_t{4096}, size_t{5} << 20}) {
    void* p = allocator->raw_allocate(n);
    REQUIRE(p != nullptr);
    static_cast<char*>(p)[n - 1] = 1;
    allocator->raw_deallocate(p);
  }
  at::Tensor x = at::randn({512, 512}), y = at::randn({512, 512});
  CHECK(at::allclose(at::mm(x, y).sum(), (x.unsqueeze(2) * y.unsqueeze(0)).sum(), 1e-3, 1e-2));
}
