// Row-major fp32 matrix products on raw pointers for the fused CPU kernels: the BLAS sgemm chosen
// for this CPU (blas_library.h), and a version split across the intra-op threads.
#pragma once
#include <cstdint>

namespace spmd::kernels::cpu {

// Whether a BLAS sgemm can be called directly (MKL's in the torch wheel, or OpenBLAS). When not,
// gemm goes through at::addmm_out.
bool has_blas_sgemm();

// C (m x n, row stride ldc) = alpha * op(A) op(B) + beta * C; op(A): (m x k), op(B): (k x n);
// A is stored (m x k) or, transposed, (k x m) with row stride lda; B likewise. beta == 0 never
// reads C. On the calling thread only (inside at::parallel_for, BLAS runs single-threaded).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product with C's rows (or, when it has few, its columns) split over at::parallel_for:
// one single-threaded sgemm per thread, no per-call thread hand-off inside the BLAS.
void parallel_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

namespace detail {
// Tests: route gemm (and the bf16 products of bf16_gemm.h) through ATen even when a BLAS was found.
void force_aten_gemm(bool force);
bool aten_gemm_forced();
}  // namespace detail

}  // namespace spmd::kernels::cpu
