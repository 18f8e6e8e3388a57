// The residual add and the norm after it as one kernel each way (NVRTC, run-time compiled;
// residual_norm.h launches them), as llm.c's fused residual LayerNorm: forward, one block per
// row: sum = x + delta (float32, the residual stream), its statistics, and norm(sum) written in
// the operand dtype; backward: the norm's gradient added to the residual's own in one pass, the
// branch's gradient written in its dtype beside it, and the weight's (and bias's) gradient summed
// per block in shared memory (deterministic: each block owns its partial row, summed after).
// LayerNorm: (s - mean) * rstd * w + b; RMSNorm (rms != 0): s * rstd * w. Statistics in float32.
// Without a delta (null) the sum is x itself, not written, and backward writes no d_delta: the
// norm at a block's start, whose gradient joins the residual's in the same pass.
// Dtype codes as bf16_bits.cuh's.

#include "kernels/cuda/bf16_bits.cuh"

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), on every thread.
__device__ inline float spmd_rn_block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

extern "C" __global__ void spmd_residual_norm_forward(const float* x, const void* delta, int delta_dtype,
                                                      const float* weight, const float* bias, float eps, int rms,
                                                      long long C, float* sum, void* normed, int normed_dtype,
                                                      float* mean_out, float* rstd_out) {
  __shared__ float scratch[32];
  const long long row = blockIdx.x, base = row * C;
  float partial = 0.f;
  for (long long j = threadIdx.x; j < C; j += blockDim.x) {
    float s = x[base + j];
    if (delta != nullptr) {
      s += spmd_load(delta, base + j, delta_dtype);
      sum[base + j] = s;
    }
    partial += s;
  }
  const float mean = rms ? 0.f : spmd_rn_block_sum(partial, scratch) / static_cast<float>(C);
  partial = 0.f;
  for (long long j = threadIdx.x; j < C; j += blockDim.x) {
    const float d = (delta != nullptr ? sum : x)[base + j] - mean;
    partial += d * d;
  }
  const float rstd = rsqrtf(spmd_rn_block_sum(partial, scratch) / static_cast<float>(C) + eps);
  for (long long j = threadIdx.x; j < C; j += blockDim.x) {
    float v = ((delta != nullptr ? sum : x)[base + j] - mean) * rstd * weight[j];
    if (bias != nullptr) v += bias[j];
    spmd_store(normed, base + j, normed_dtype, v);
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

// Dynamic shared memory: 2 C floats (the block's partial weight and bias gradients).
extern "C" __global__ void spmd_residual_norm_backward(const float* sum, const float* weight, const float* mean_in,
                                                       const float* rstd_in, const void* d_normed, int d_normed_dtype,
                                                       const float* d_sum_in, int rms, long long rows, long long C,
                                                       float* d_sum, void* d_delta, int d_delta_dtype,
                                                       float* weight_partials, float* bias_partials) {
  extern __shared__ float partials[];
  __shared__ float scratch[32];
  float* dw = partials;
  float* db = partials + C;
  for (long long j = threadIdx.x; j < C; j += blockDim.x) dw[j] = db[j] = 0.f;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = row * C;
    const float mean = mean_in[row], rstd = rstd_in[row];
    float g_sum = 0.f, g_xhat = 0.f;
    for (long long j = threadIdx.x; j < C; j += blockDim.x) {
      const float xhat = (sum[base + j] - mean) * rstd;
      const float g = spmd_load(d_normed, base + j, d_normed_dtype) * weight[j];
      g_sum += g;
      g_xhat += g * xhat;
    }
    const float mean_g = rms ? 0.f : spmd_rn_block_sum(g_sum, scratch) / static_cast<float>(C);
    const float mean_g_xhat = spmd_rn_block_sum(g_xhat, scratch) / static_cast<float>(C);
    for (long long j = threadIdx.x; j < C; j += blockDim.x) {
      const float xhat = (sum[base + j] - mean) * rstd;
      const float dn = spmd_load(d_normed, base + j, d_normed_dtype);
      float d = rstd * (dn * weight[j] - mean_g - xhat * mean_g_xhat);
      if (d_sum_in != nullptr) d += d_sum_in[base + j];
      d_sum[base + j] = d;
      if (d_delta != nullptr) spmd_store(d_delta, base + j, d_delta_dtype, d);
      dw[j] += dn * xhat;
      db[j] += dn;
    }
  }
  __syncthreads();
  for (long long j = threadIdx.x; j < C; j += blockDim.x) {
    weight_partials[blockIdx.x * C + j] = dw[j];
    bias_partials[blockIdx.x * C + j] = db[j];
  }
}
