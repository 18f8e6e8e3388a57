// splitmix64-based counter hashing (kernels/counter_hash.h, shared with the GPU kernel); Box-Muller
// for normals.
#include "parallel/counter_rng.h"

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "kernels/counter_hash.h"
#include "kernels/cpu/vector_math.h"
#ifdef SPMD_WITH_CUDA
#include "kernels/cuda/counter_dropout.h"
#endif
#include "util/error.h"

namespace spmd {

namespace {
using counter_hash::splitmix64;

// Draw `counter` of a stream is splitmix64(key ^ counter); the key depends on (seed, stream) only.
inline uint64_t stream_key(uint64_t seed, uint64_t stream) { return splitmix64(seed ^ splitmix64(stream)); }

// One contiguous run of a dropout mask: elements with global indices first, first + 1, ...
SPMD_VECTOR_CLONES
void dropout_run(float* out, int64_t n, uint64_t key, uint64_t first, double p_scaled, float keep_scale) {
  for (int64_t j = 0; j < n; ++j)
    out[j] = counter_hash::dropout_element(key, first + static_cast<uint64_t>(j), p_scaled, keep_scale);
}

// Uniform in (0, 1] from the top 53 bits.
inline double unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0); }

// The block as counter_hash's index math (and the GPU kernel) takes it.
counter_hash::BlockIndex block_index(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                                     const std::vector<int64_t>& offset) {
  const size_t nd = local_shape.size();
  SPMD_ASSERT(nd <= counter_hash::kMaxBlockRank && global_shape.size() == nd && offset.size() == nd,
              "a counter-based block of rank {} (global rank {}, offset rank {}); at most {}", nd, global_shape.size(),
              offset.size(), counter_hash::kMaxBlockRank);
  counter_hash::BlockIndex block{};
  block.rank = static_cast<int>(nd);
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(nd) - 1; d >= 0; --d) {
    const auto i = static_cast<size_t>(d);
    block.shape[i] = local_shape[i];
    block.offset[i] = offset[i];
    block.global_stride[i] = stride;
    stride *= global_shape[i];
  }
  return block;
}

// Calls f(local_start, global_start, n) for every row of the block along its last dim: n elements
// whose local and global indices both run on contiguously. Rows are independent, so the threads
// split them (what f writes cannot depend on how).
template <typename F>
void for_each_global_row(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                         const std::vector<int64_t>& offset, F f) {
  const counter_hash::BlockIndex block = block_index(local_shape, global_shape, offset);
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

at::Tensor dropout_mask_block(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                              const std::vector<int64_t>& offset, uint64_t seed, uint64_t stream, double p) {
  at::Tensor mask = at::empty(local_shape, at::kFloat);
  float* out = mask.data_ptr<float>();
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
  const uint64_t key = stream_key(seed, stream);
  const double p_scaled = p * 9007199254740992.0;  // p * 2^53, exact
  for_each_global_row(local_shape, global_shape, offset, [&](int64_t li, int64_t gi, int64_t n) {
    dropout_run(out + li, n, key, static_cast<uint64_t>(gi), p_scaled, keep_scale);
  });
  return mask;
}

at::Tensor dropout_mask_block_on(c10::Device device, const std::vector<int64_t>& local_shape,
                                 const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset,
                                 uint64_t seed, uint64_t stream, double p) {
  if (device.is_cpu()) return dropout_mask_block(local_shape, global_shape, offset, seed, stream, p);
#ifdef SPMD_WITH_CUDA
  if (device.is_cuda()) {
    at::Tensor mask = at::empty(local_shape, at::TensorOptions().dtype(at::kFloat).device(device));
    kernels::cuda::counter_dropout_mask(mask, block_index(local_shape, global_shape, offset), stream_key(seed, stream),
                                        p * 9007199254740992.0, static_cast<float>(1.0 / (1.0 - p)));
    return mask;
  }
#endif
  // Another device: the CPU's bits, copied over.
  return dropout_mask_block(local_shape, global_shape, offset, seed, stream, p).to(device);
}

}  // namespace spmd
