#include "kernels/cpu/row_reductions.h"

#if defined(__GNUC__) && !defined(__clang__)
#define SPMD_REDUCTION_MATH(...) __attribute__((optimize(__VA_ARGS__)))
#else
#define SPMD_REDUCTION_MATH(...)
#endif
#include "kernels/cpu/vector_math.h"

namespace spmd::kernels::cpu {

// A max reduction only vectorizes when the compiler may assume finite values.
SPMD_REDUCTION_MATH("no-trapping-math", "finite-math-only", "no-signed-zeros")
SPMD_VECTOR_CLONES
float row_max(const float* row, int64_t n) {
  float m = row[0];
  for (int64_t j = 1; j < n; ++j) m = row[j] > m ? row[j] : m;
  return m;
}

SPMD_REDUCTION_MATH("no-trapping-math", "associative-math", "no-signed-zeros")
SPMD_VECTOR_CLONES
float row_dot(const float* a, const float* b, int64_t n) {
  float sum = 0;
  if (b)
    for (int64_t j = 0; j < n; ++j) sum += a[j] * b[j];
  else
    for (int64_t j = 0; j < n; ++j) sum += a[j];
  return sum;
}

}  // namespace spmd::kernels::cpu
