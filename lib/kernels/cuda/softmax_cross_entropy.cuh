// The LM head's loss and its gradient from float32 logits in one kernel (NVRTC, run-time
// compiled; softmax_cross_entropy.h launches it), as llm.c's fused classifier: one block per row
// reads the row once for its max and sum of exponentials (an online softmax: each thread keeps a
// running max and sum, merged across the block), writes the row's loss, then reads it again
// (from L2) to write softmax - one_hot in bf16. The probabilities never reach memory in float32.
// Columns >= valid are padding: probability 0. A negative target scores nothing: loss 0, and the
// gradient row is the softmax alone (the caller zeroes that row's contributions).

#include "kernels/cuda/bf16_bits.cuh"

#define SPMD_INF __int_as_float(0x7f800000)

// (m, s) of one set merged with another's: the max, and the sum of exp(x - max).
__device__ inline void spmd_merge(float& m, float& s, float m2, float s2) {
  if (m2 == -SPMD_INF) return;
  if (m == -SPMD_INF) {
    m = m2;
    s = s2;
    return;
  }
  if (m2 > m) {
    s = s * expf(m - m2) + s2;
    m = m2;
  } else {
    s += s2 * expf(m2 - m);
  }
}

extern "C" __global__ void spmd_softmax_cross_entropy(const float* logits, long long ld, long long columns,
                                                      long long valid, const long long* targets, float* losses,
                                                      unsigned short* grad, long long grad_ld) {
  __shared__ float block_max[32], block_sum[32];
  const long long row = blockIdx.x;
  const float* z = logits + row * ld;
  float m = -SPMD_INF, s = 0.f;
  for (long long j = threadIdx.x; j < valid; j += blockDim.x) spmd_merge(m, s, z[j], 1.f);
  for (int offset = 16; offset > 0; offset /= 2)
    spmd_merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  if (lane == 0) {
    block_max[warp] = m;
    block_sum[warp] = s;
  }
  __syncthreads();
  m = -SPMD_INF;
  s = 0.f;
  for (int w = 0; w < warps; ++w) spmd_merge(m, s, block_max[w], block_sum[w]);
  const long long target = targets[row];
  if (threadIdx.x == 0) losses[row] = target >= 0 ? logf(s) + m - z[target] : 0.f;
  if (grad == nullptr) return;
  const float inverse_sum = 1.f / s;
  unsigned short* g = grad + row * grad_ld;
  for (long long j = threadIdx.x; j < columns; j += blockDim.x) {
    float p = j < valid ? expf(z[j] - m) * inverse_sum : 0.f;
    if (j == target) p -= 1.f;
    g[j] = spmd_to_bf16(p);
  }
}
