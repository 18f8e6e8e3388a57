// A caching CPU allocator for training: blocks of 1 MiB and more go back to a free list on
// release and are handed out again to the next request of the same (rounded) size, so a step that
// frees and reallocates the same activations as the last one takes no new memory from the system.
// With libtorch's default (posix_memalign), every block over glibc's 32 MiB mmap threshold is
// mapped and unmapped each time, its pages faulted in and zeroed by the kernel: about a sixth of a
// step of the 10.7M-parameter model here (bench/NOTES.md).
#pragma once
#include <cstdint>

namespace spmd {

// Makes it the CPU allocator of every tensor allocated from now on (c10::SetCPUAllocator);
// tensors that exist keep their own deleters. Idempotent. Free cached bytes are capped at
// `max_cached_bytes` (0: a quarter of physical memory); beyond that, released blocks are freed.
void install_caching_cpu_allocator(int64_t max_cached_bytes = 0);

struct CachingCpuAllocatorStats {
  bool installed = false;
  int64_t allocations = 0;      // requests served (all sizes)
  int64_t cache_hits = 0;       // large requests served from the free lists
  int64_t cached_bytes = 0;     // bytes in the free lists now
  int64_t live_bytes = 0;       // bytes of tensors allocated by it and alive now (sizes rounded)
  int64_t peak_live_bytes = 0;  // the most live_bytes since install or reset_peak_live_bytes()
};
CachingCpuAllocatorStats caching_cpu_allocator_stats();
void reset_peak_live_bytes();

}  // namespace spmd
