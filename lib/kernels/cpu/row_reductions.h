// What the fused attention kernels share: the query rows they process at once, and vectorized
// reductions over one row of floats. The reductions are compiled in their own file with the looser
// float rules a vectorized reduction needs (which the kernels' elementwise loops must not get: they
// would change exp_approx's rounding).
#pragma once
#include <cstdint>

namespace spmd::kernels::cpu {

// Query rows per block in both kernels: a row block computes only the keys its rows can see.
inline constexpr int64_t kRowBlock = 32;

// max(row[0..n)), n >= 1; the row's values are finite.
float row_max(const float* row, int64_t n);

// sum(a[j] * b[j]) over [0, n), or sum(a) when b is null, in vector lanes (reassociated).
float row_dot(const float* a, const float* b, int64_t n);

}  // namespace spmd::kernels::cpu
