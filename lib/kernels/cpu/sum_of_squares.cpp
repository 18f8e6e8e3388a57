// The squared-sum reduction over the intra-op threads, each chunk summed in vector lanes.
#include "kernels/cpu/sum_of_squares.h"

#include <functional>

#include <ATen/Parallel.h>

#include "kernels/cpu/vector_math.h"
#include "util/error.h"

namespace spmd::kernels::cpu {

namespace {
// Reassociation lets GCC keep several double accumulators in vector lanes.
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("associative-math", "no-signed-zeros", "no-trapping-math")))
#endif
SPMD_VECTOR_CLONES double sum_of_squares_range(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}
}  // namespace

bool fused_sum_of_squares_supports(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

double fused_sum_of_squares(const at::Tensor& t) {
  SPMD_ASSERT(fused_sum_of_squares_supports(t), "fused_sum_of_squares: needs a float32 contiguous CPU tensor");
  const float* x = t.data_ptr<float>();
  return at::parallel_reduce(
      0, t.numel(), 32768, 0.0,
      [&](int64_t begin, int64_t end, double partial) { return partial + sum_of_squares_range(x + begin, end - begin); },
      std::plus<double>());
}

}  // namespace spmd::kernels::cpu
