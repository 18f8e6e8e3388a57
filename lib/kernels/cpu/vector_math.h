// Elementwise helpers for the fused CPU kernels, written so that GCC vectorizes the loops that
// call them. Include this after
//   #pragma GCC optimize("no-trapping-math")   // lets GCC if-convert the clamps below
// in the .cpp (the kernels' loops must be compiled with the same options to inline it), and mark
// the loop functions SPMD_VECTOR_CLONES to get an AVX2+FMA version picked at load time.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define SPMD_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SPMD_VECTOR_CLONES
#endif

namespace spmd::kernels::cpu::vecmath {

// exp(x), about 1 ulp, for x in [-87.3, 88.3] (clamped outside: exp(-inf) comes out as about
// 1e-38, not 0). Cephes' expf: 2^n times a degree-6 polynomial of the remainder. Branch-free:
// ternaries (not std::min) are what GCC if-converts.
inline float exp_approx(float x) {
  x = x > 88.3f ? 88.3f : x;
  x = x < -87.3f ? -87.3f : x;
  const float t = x * 1.44269504088896341f;
  const float nf = (t + 12582912.0f) - 12582912.0f;               // round to nearest: 1.5 * 2^23
  const float r = (x - nf * 0.693359375f) + nf * 2.12194440e-4f;  // x - n ln2, in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(nf) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// bfloat16 as its raw bits, the upper half of a float32 (integer ops, which GCC vectorizes):
// widened exactly, and rounded to nearest even as at::BFloat16 rounds (a NaN stays a NaN: the
// rounding carry would turn some into -0 or infinity).
inline float bf16_to_float(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint16_t float_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const uint16_t rounded = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  return v != v ? uint16_t{0x7FC0} : rounded;
}

}  // namespace spmd::kernels::cpu::vecmath
