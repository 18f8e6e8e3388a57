// Float32 and bfloat16 elements as the kernels of our own read and write them (NVRTC has no
// cuda_bf16.h of its own): bf16 as its 16 bits, rounded to nearest even as c10::BFloat16 rounds,
// NaN kept NaN. Dtype codes: 0 float32, 1 bfloat16. Included by the kernels' sources.
#pragma once

__device__ inline unsigned short spmd_to_bf16(float f) {
  const unsigned int bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<unsigned short>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

__device__ inline float spmd_load(const void* p, long long i, int dtype) {
  if (dtype == 0) return static_cast<const float*>(p)[i];
  return __uint_as_float(static_cast<unsigned int>(static_cast<const unsigned short*>(p)[i]) << 16);
}

__device__ inline void spmd_store(void* p, long long i, int dtype, float v) {
  if (dtype == 0) static_cast<float*>(p)[i] = v;
  else static_cast<unsigned short*>(p)[i] = spmd_to_bf16(v);
}
