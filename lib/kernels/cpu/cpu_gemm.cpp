// Row-major wrappers around the selected BLAS sgemm (blas_library.h), and the thread split.
#include "kernels/cpu/cpu_gemm.h"

#include "kernels/cpu/blas_library.h"

#include <algorithm>
#include <atomic>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

namespace spmd::kernels::cpu {

namespace {

std::atomic<bool> g_force_aten{false};

SgemmFn blas_sgemm() { return detail::aten_gemm_forced() ? nullptr : selected_sgemm(); }

at::Tensor matrix_view(const float* p, int64_t rows, int64_t cols, int64_t ld, bool trans) {
  at::Tensor t = at::from_blob(const_cast<float*>(p), {trans ? cols : rows, trans ? rows : cols}, {ld, 1},
                               at::TensorOptions().dtype(at::kFloat));
  return trans ? t.t() : t;
}

// Below this many multiply-adds a product stays on one thread.
constexpr int64_t kParallelWork = 1 << 18;

}  // namespace

bool has_blas_sgemm() { return blas_sgemm() != nullptr; }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (SgemmFn sgemm = blas_sgemm()) {
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
    const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
    const int ldai = static_cast<int>(lda), ldbi = static_cast<int>(ldb), ldci = static_cast<int>(ldc);
    sgemm(&tb, &ta, &ni, &mi, &ki, &alpha, b, &ldbi, a, &ldai, &beta, c, &ldci);
    return;
  }
  at::Tensor out = at::from_blob(c, {m, n}, {ldc, 1}, at::TensorOptions().dtype(at::kFloat));
  at::addmm_out(out, out, matrix_view(a, m, k, lda, trans_a), matrix_view(b, k, n, ldb, trans_b), beta, alpha);
}

void parallel_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int64_t threads = at::get_num_threads();
  if (threads <= 1 || m * n * k < kParallelWork || at::in_parallel_region()) {
    gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m >= n) {  // rows of C (rows of op(A))
    const int64_t chunk = (m + threads - 1) / threads;
    at::parallel_for(0, m, chunk, [&](int64_t r0, int64_t r1) {
      gemm(trans_a, trans_b, r1 - r0, n, k, alpha, trans_a ? a + r0 : a + r0 * lda, lda, b, ldb, beta, c + r0 * ldc,
           ldc);
    });
  } else {  // columns of C (columns of op(B)), in multiples of 16 for the vector kernels
    const int64_t chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
    at::parallel_for(0, n, chunk, [&](int64_t c0, int64_t c1) {
      gemm(trans_a, trans_b, m, c1 - c0, k, alpha, a, lda, trans_b ? b + c0 * ldb : b + c0, ldb, beta, c + c0, ldc);
    });
  }
}

namespace detail {
void force_aten_gemm(bool force) { g_force_aten = force; }
bool aten_gemm_forced() { return g_force_aten.load(std::memory_order_relaxed); }
}  // namespace detail

}  // namespace spmd::kernels::cpu
