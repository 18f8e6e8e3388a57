// float32 and bf16 storage as the fused elementwise CPU kernels read and write it: bf16 as its
// raw bits (uint16_t), widened to float32 on load and rounded to nearest even on store, so one
// template serves both dtypes. Include it, like vector_math.h, after the .cpp's optimize pragma.
#pragma once
#include <cstdint>
#include <type_traits>

#include <ATen/ATen.h>

#include "kernels/cpu/vector_math.h"

namespace spmd::kernels::cpu {

inline float widen(float v) { return v; }
inline float widen(uint16_t v) { return vecmath::bf16_to_float(v); }

template <typename T>
inline T narrow_to(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return vecmath::float_to_bf16(v);
}

// A float32 or bf16 tensor's elements as T (float, or uint16_t for bf16).
template <typename T>
T* elements_of(const at::Tensor& t) {
  if constexpr (std::is_same_v<T, float>) return t.data_ptr<float>();
  else return reinterpret_cast<T*>(t.data_ptr<at::BFloat16>());
}

}  // namespace spmd::kernels::cpu
