// Pointwise ops that libtorch runs as several passes, one kernel each way (NVRTC, run-time
// compiled; pointwise.h launches them): the rotary embedding of bf16 queries or keys (computed in
// float32, rounded once; the backward is the rotation by the opposite angle) and SwiGLU,
// silu(gate) * up (backward: both gradients in one pass, recomputing silu). Dtype codes as
// bf16_bits.cuh's. Grid-stride loops: any size.

#include "kernels/cuda/bf16_bits.cuh"

// x, out: contiguous (B, T, H, D); cos, sin: float32 (P, T, D) with P 1 (every row's positions
// alike) or B. y_lo = x_lo c - x_hi s, y_hi = x_hi c + x_lo s over the two halves of D; `sign`
// -1 rotates back (the backward).
extern "C" __global__ void spmd_rotary(const void* x, void* out, int dtype, const float* cos, const float* sin,
                                       long long B, long long T, long long H, long long D, long long P, float sign) {
  const long long half = D / 2, pairs = B * T * H * half;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < pairs;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long d = i % half, row = i / half;  // row = (b * T + t) * H + h
    const long long t = (row / H) % T, b = row / (H * T);
    const long long angle = ((P == 1 ? 0 : b) * T + t) * D + d;
    const float c = cos[angle], s = sign * sin[angle];
    const long long lo = row * D + d, hi = lo + half;
    const float x_lo = spmd_load(x, lo, dtype), x_hi = spmd_load(x, hi, dtype);
    spmd_store(out, lo, dtype, x_lo * c - x_hi * s);
    spmd_store(out, hi, dtype, x_hi * c + x_lo * s);
  }
}

__device__ inline float spmd_pw_sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

extern "C" __global__ void spmd_swiglu_forward(const void* gate, const void* up, void* out, int dtype, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float g = spmd_load(gate, i, dtype);
    spmd_store(out, i, dtype, g * spmd_pw_sigmoid(g) * spmd_load(up, i, dtype));
  }
}

// d_gate = dy up silu'(g), silu'(g) = s (1 + g (1 - s)); d_up = dy silu(g).
extern "C" __global__ void spmd_swiglu_backward(const void* gate, const void* up, const void* d_out, void* d_gate,
                                                void* d_up, int dtype, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float g = spmd_load(gate, i, dtype), u = spmd_load(up, i, dtype), dy = spmd_load(d_out, i, dtype);
    const float s = spmd_pw_sigmoid(g);
    spmd_store(d_gate, i, dtype, dy * u * s * (1.f + g * (1.f - s)));
    spmd_store(d_up, i, dtype, dy * g * s);
  }
}
