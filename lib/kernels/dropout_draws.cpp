#include "kernels/dropout_draws.h"

#include <algorithm>
#include <cstring>

#include <ATen/Parallel.h>

#include "kernels/cpu/vector_math.h"
#include "kernels/cuda_module.h"
#include "util/error.h"

namespace spmd::kernels {

namespace {
// One contiguous run of a mask: elements with global indices first, first + 1, ...
SPMD_VECTOR_CLONES
void dropout_run(float* out, int64_t n, uint64_t key, uint64_t first, double p_scaled, float keep_scale) {
  for (int64_t j = 0; j < n; ++j)
    out[j] = counter_hash::dropout_element(key, first + static_cast<uint64_t>(j), p_scaled, keep_scale);
}

int64_t bits_of(double x) {
  int64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
double double_of(int64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
}  // namespace

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

DropoutDraws::DropoutDraws(std::vector<int64_t> local_shape, const std::vector<int64_t>& global_shape,
                           const std::vector<int64_t>& offset, uint64_t key_in, double p_in)
    : shape(std::move(local_shape)),
      block(block_index(shape, global_shape, offset)),
      key(key_in),
      p(p_in),
      present(true) {
  SPMD_ASSERT(p >= 0 && p < 1, "dropout draws need 0 <= p < 1, got {}", p);
}

void DropoutDraws::fill_row(float* out, int64_t first, int64_t n) const {
  const uint64_t global = counter_hash::global_index(block, static_cast<uint64_t>(first));
  dropout_run(out, n, key, global, p_scaled(), keep_scale());
}

at::Tensor DropoutDraws::materialize(c10::Device device) const {
  at::Tensor mask = at::empty(shape, at::TensorOptions().dtype(at::kFloat).device(device));
  if (device.is_cuda() && spmd::cuda::built()) {
    spmd::cuda::module().counter_dropout_mask(mask, block, key, p_scaled(), keep_scale());
    return mask;
  }
  if (!device.is_cpu()) return materialize(at::kCPU).to(device);  // another device: the CPU's bits, copied
  const int64_t row = shape.empty() ? 1 : shape.back(), rows = row ? numel_of(shape) / row : 0;
  float* out = mask.data_ptr<float>();
  // Rows are independent, so the threads split them (what a row holds cannot depend on how).
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(row, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fill_row(out + r * row, r * row, row);
  });
  return mask;
}

std::vector<int64_t> DropoutDraws::to_ints() const {
  std::vector<int64_t> ints{static_cast<int64_t>(key), bits_of(p), static_cast<int64_t>(shape.size())};
  ints.insert(ints.end(), shape.begin(), shape.end());
  for (int d = 0; d < block.rank; ++d) ints.insert(ints.end(), {block.global_stride[d], block.offset[d]});
  return ints;
}

DropoutDraws DropoutDraws::from_ints(const std::vector<int64_t>& ints) {
  DropoutDraws draws;
  draws.present = true;
  draws.key = static_cast<uint64_t>(ints.at(0));
  draws.p = double_of(ints.at(1));
  const auto rank = static_cast<size_t>(ints.at(2));
  SPMD_ASSERT(rank <= counter_hash::kMaxBlockRank && ints.size() == 3 + 3 * rank, "dropout draws from {} integers",
              ints.size());
  draws.shape.assign(ints.begin() + 3, ints.begin() + 3 + static_cast<int64_t>(rank));
  draws.block.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) {
    draws.block.shape[d] = draws.shape[d];
    draws.block.global_stride[d] = ints[3 + rank + 2 * d];
    draws.block.offset[d] = ints[3 + rank + 2 * d + 1];
  }
  return draws;
}

}  // namespace spmd::kernels
