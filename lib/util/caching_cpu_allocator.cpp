// Every block carries a 64-byte header with its rounded size in front of the data, so one deleter
// serves DataPtr contexts and raw_allocate alike. Small blocks are freed at once; large ones are
// kept in per-size free lists under one mutex.
#include "util/caching_cpu_allocator.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace spmd {

namespace {

constexpr size_t kHeader = 64;              // keeps the data 64-byte aligned, as c10's allocator
constexpr size_t kMinCached = size_t{1} << 20;
constexpr size_t kRound = size_t{1} << 16;  // large sizes round up to 64 KiB: near sizes share a list

struct Cache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // rounded size -> headers
  size_t cached_bytes = 0;
  size_t max_cached_bytes = 0;
  int64_t allocations = 0, cache_hits = 0;
  bool installed = false;
  std::atomic<int64_t> live_bytes{0}, peak_live_bytes{0};  // blocks handed out and not yet released
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during static destruction
  return *c;
}

size_t& header_size(void* base) { return *static_cast<size_t*>(base); }

void release(void* data) {
  if (data == nullptr) return;
  void* base = static_cast<char*>(data) - kHeader;
  const size_t size = header_size(base);
  Cache& c = cache();
  c.live_bytes.fetch_sub(static_cast<int64_t>(size), std::memory_order_relaxed);
  if (size >= kMinCached) {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached_bytes + size <= c.max_cached_bytes) {
      c.free_blocks[size].push_back(base);
      c.cached_bytes += size;
      return;
    }
  }
  std::free(base);
}

c10::DataPtr allocate_block(size_t n) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (n == 0) return {nullptr, nullptr, &release, cpu};
  const size_t size = n >= kMinCached ? (n + kRound - 1) / kRound * kRound : n;
  Cache& c = cache();
  void* base = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    ++c.allocations;
    if (size >= kMinCached) {
      auto it = c.free_blocks.find(size);
      if (it != c.free_blocks.end() && !it->second.empty()) {
        base = it->second.back();
        it->second.pop_back();
        c.cached_bytes -= size;
        ++c.cache_hits;
      }
    }
  }
  if (base == nullptr) {
    if (posix_memalign(&base, kHeader, size + kHeader) != 0) throw std::bad_alloc();
    header_size(base) = size;
  }
  const int64_t live = c.live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed) +
                       static_cast<int64_t>(size);
  int64_t peak = c.peak_live_bytes.load(std::memory_order_relaxed);
  while (live > peak && !c.peak_live_bytes.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  void* data = static_cast<char*>(base) + kHeader;
  return {data, data, &release, cpu};
}

// libtorch 2.0-2.2 declare `allocate(size_t) const`, later versions `allocate(size_t)`: both are
// defined, and whichever the base declares is the override.
struct CachingCpuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t n) const { return allocate_block(n); }
  c10::DataPtr allocate(size_t n) { return allocate_block(n); }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  // Required by libtorch 2.x's Allocator.
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count > 0) std::memcpy(dest, src, count);
  }
};

}  // namespace

void install_caching_cpu_allocator(int64_t max_cached_bytes) {
  static CachingCpuAllocator allocator;
  static std::once_flag once;
  std::call_once(once, [&] {
    Cache& c = cache();
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    c.max_cached_bytes = max_cached_bytes > 0 ? static_cast<size_t>(max_cached_bytes)
                                              : static_cast<size_t>(pages > 0 && page > 0 ? pages / 4 * page : 1L << 30);
    c10::SetCPUAllocator(&allocator, /*priority=*/1);
    c.installed = true;
  });
}

CachingCpuAllocatorStats caching_cpu_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {c.installed, c.allocations, c.cache_hits, static_cast<int64_t>(c.cached_bytes),
          c.live_bytes.load(std::memory_order_relaxed), c.peak_live_bytes.load(std::memory_order_relaxed)};
}

void reset_peak_live_bytes() {
  Cache& c = cache();
  c.peak_live_bytes.store(c.live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace spmd
