// splitmix64-based counter hashing (kernels/counter_hash.h, shared with the GPU kernel); Box-Muller
// for normals.
#include "parallel/counter_rng.h"

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "kernels/counter_hash.h"
#include "util/error.h"

namespace spmd {

namespace {
using counter_hash::splitmix64;

// Draw `counter` of a stream is splitmix64(key ^ counter); the key depends on (seed, stream) only.
inline uint64_t stream_key(uint64_t seed, uint64_t stream) { return splitmix64(seed ^ splitmix64(stream)); }

// Uniform in (0, 1] from the top 53 bits.
inline double unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0); }

// Calls f(local_start, global_start, n) for every row of the block along its last dim: n elements
// whose local and global indices both run on contiguously. Rows are independent, so the threads
// split them (what f writes cannot depend on how).
template <typename F>
void for_each_global_row(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                         const std::vector<int64_t>& offset, F f) {
  const counter_hash::BlockIndex block = kernels::block_index(local_shape, global_shape, offset);
  if (local_shape.empty()) {
    f(0, 0, 1);
    return;
  }
  int64_t numel = 1;
  for (int64_t s : local_shape) numel *= s;
  const int64_t row = local_shape.back();
  if (numel == 0) return;
  at::parallel_for(0, numel / row, std::max<int64_t>(1, 16384 / row), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      f(r * row, static_cast<int64_t>(counter_hash::global_index(block, static_cast<uint64_t>(r * row))), row);
  });
}
}  // namespace

double uniform_draw(uint64_t seed, uint64_t stream, uint64_t index) {
  return unit(splitmix64(stream_key(seed, stream) ^ index));
}

uint64_t stream_id(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

void fill_normal_block(at::Tensor& local, const std::vector<int64_t>& global_shape,
                       const std::vector<int64_t>& offset, uint64_t seed, uint64_t stream, double std) {
  SPMD_ASSERT(local.is_contiguous() && local.scalar_type() == at::kFloat, "fill_normal_block needs contiguous float");
  float* out = local.data_ptr<float>();
  const uint64_t key = stream_key(seed, stream);
  for_each_global_row(local.sizes().vec(), global_shape, offset, [&](int64_t li, int64_t gi, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      // Box-Muller on two draws keyed by the global index.
      const uint64_t g = static_cast<uint64_t>(gi + j);
      double u1 = unit(splitmix64(key ^ (2 * g)));
      double u2 = unit(splitmix64(key ^ (2 * g + 1)));
      out[li + j] = static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
    }
  });
}

kernels::DropoutDraws dropout_draws(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                                    const std::vector<int64_t>& offset, uint64_t seed, uint64_t stream, double p) {
  return {local_shape, global_shape, offset, stream_key(seed, stream), p};
}

at::Tensor dropout_mask_block(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                              const std::vector<int64_t>& offset, uint64_t seed, uint64_t stream, double p) {
  return dropout_draws(local_shape, global_shape, offset, seed, stream, p).materialize(at::kCPU);
}

at::Tensor dropout_mask_block_on(c10::Device device, const std::vector<int64_t>& local_shape,
                                 const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset,
                                 uint64_t seed, uint64_t stream, double p) {
  return dropout_draws(local_shape, global_shape, offset, seed, stream, p).materialize(device);
}

}  // namespace spmd
