// splitmix64-based counter hashing; Box-Muller for normals.
#include "parallel/counter_rng.h"

#include <algorithm>
#include <cmath>

#include <ATen/Parallel.h>

#include "kernels/cpu/vector_math.h"
#include "util/error.h"

namespace spmd {

namespace {
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Draw `counter` of a stream is splitmix64(key ^ counter); the key depends on (seed, stream) only.
inline uint64_t stream_key(uint64_t seed, uint64_t stream) { return splitmix64(seed ^ splitmix64(stream)); }

// One contiguous run of a dropout mask: elements with global indices first, first + 1, ...
// unit(bits) > p, compared exactly as ((bits >> 11) + 1) > p * 2^53 (both sides exact doubles).
SPMD_VECTOR_CLONES
void dropout_run(float* out, int64_t n, uint64_t key, uint64_t first, double p_scaled, float keep_scale) {
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t bits = splitmix64(key ^ (first + static_cast<uint64_t>(j)));
    out[j] = static_cast<double>((bits >> 11) + 1) > p_scaled ? keep_scale : 0.0f;
  }
}

// Uniform in (0, 1] from the top 53 bits.
inline double unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0); }

// Calls f(local_start, global_start, n) for every row of the block along its last dim: n elements
// whose local and global indices both run on contiguously. Rows are independent, so the threads
// split them (what f writes cannot depend on how).
template <typename F>
void for_each_global_row(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                         const std::vector<int64_t>& offset, F f) {
  const size_t nd = local_shape.size();
  if (nd == 0) {
    f(0, 0, 1);
    return;
  }
  int64_t numel = 1;
  for (int64_t s : local_shape) numel *= s;
  const int64_t row = local_shape[nd - 1];
  if (numel == 0) return;
  std::vector<int64_t> global_stride(nd, 1);
  for (int64_t d = static_cast<int64_t>(nd) - 2; d >= 0; --d) global_stride[d] = global_stride[d + 1] * global_shape[d + 1];
  at::parallel_for(0, numel / row, std::max<int64_t>(1, 16384 / row), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rest = r, first = offset[nd - 1];  // global index of the row's first element
      for (int64_t d = static_cast<int64_t>(nd) - 2; d >= 0; --d) {
        first += (rest % local_shape[d] + offset[d]) * global_stride[d];
        rest /= local_shape[d];
      }
      f(r * row, first, row);
    }
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

namespace {
// The uint64 arithmetic of splitmix64 on int64 tensors (same bits: two's-complement products and
// sums wrap mod 2^64). ATen's >> on int64 is arithmetic, hence the mask for a logical shift.
int64_t bits_of(uint64_t x) { return static_cast<int64_t>(x); }

at::Tensor logical_shift_right(const at::Tensor& x, int k) {
  return at::bitwise_and(at::bitwise_right_shift(x, k), bits_of(~0ull >> k));
}

at::Tensor splitmix64_of(at::Tensor x) {
  x = x + bits_of(0x9E3779B97F4A7C15ull);
  x = at::bitwise_xor(x, logical_shift_right(x, 30)) * bits_of(0xBF58476D1CE4E5B9ull);
  x = at::bitwise_xor(x, logical_shift_right(x, 27)) * bits_of(0x94D049BB133111EBull);
  return at::bitwise_xor(x, logical_shift_right(x, 31));
}

// The global element index of every element of the block, (local_shape) int64 on `device`.
at::Tensor global_indices(c10::Device device, const std::vector<int64_t>& local_shape,
                          const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset) {
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor index = at::zeros(local_shape, options);
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(local_shape.size()) - 1; d >= 0; --d) {
    std::vector<int64_t> along(local_shape.size(), 1);
    along[static_cast<size_t>(d)] = local_shape[static_cast<size_t>(d)];
    index.add_((at::arange(local_shape[static_cast<size_t>(d)], options) + offset[static_cast<size_t>(d)]).view(along) * stride);
    stride *= global_shape[static_cast<size_t>(d)];
  }
  return index;
}
}  // namespace

at::Tensor dropout_mask_block_on(c10::Device device, const std::vector<int64_t>& local_shape,
                                 const std::vector<int64_t>& global_shape, const std::vector<int64_t>& offset,
                                 uint64_t seed, uint64_t stream, double p) {
  // The integer temporaries are 8 bytes an element, a few at once: a large block (an attention
  // mask is B H T T) is drawn a few leading rows at a time into the float mask.
  constexpr int64_t kElementsAtOnce = int64_t{1} << 24;
  int64_t numel = 1;
  for (int64_t s : local_shape) numel *= s;
  if (numel > kElementsAtOnce && local_shape[0] > 1) {
    const int64_t rows = std::max<int64_t>(1, kElementsAtOnce / (numel / local_shape[0]));
    at::Tensor mask = at::empty(local_shape, at::TensorOptions().dtype(at::kFloat).device(device));
    for (int64_t start = 0; start < local_shape[0]; start += rows) {
      std::vector<int64_t> part = local_shape, part_offset = offset;
      part[0] = std::min(rows, local_shape[0] - start);
      part_offset[0] += start;
      mask.narrow(0, start, part[0]).copy_(dropout_mask_block_on(device, part, global_shape, part_offset, seed, stream, p));
    }
    return mask;
  }
  const at::Tensor index = global_indices(device, local_shape, global_shape, offset);
  const at::Tensor bits = splitmix64_of(at::bitwise_xor(index, bits_of(stream_key(seed, stream))));
  // dropout_run's test ((bits >> 11) + 1) > p 2^53 in integers: k > x <=> k > floor(x) for integer k.
  const auto threshold = static_cast<int64_t>(std::floor(p * 9007199254740992.0));
  const at::Tensor keep = (logical_shift_right(bits, 11) + 1) > threshold;
  const float keep_scale = static_cast<float>(1.0 / (1.0 - p));
  return at::where(keep, at::scalar_tensor(keep_scale, at::TensorOptions().device(device)),
                   at::scalar_tensor(0.0f, at::TensorOptions().device(device)));
}

}  // namespace spmd
