#include "kernels/cpu/bf16_gemm.h"

#include <dlfcn.h>

#include <climits>

#include <fmt/ranges.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_gemm.h"
#include "util/error.h"

namespace spmd::kernels::cpu {

namespace {

// MKL's CBLAS enumerations and signature (mkl_cblas.h), LP64 integers.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using Bf16GemmFn = void (*)(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const void* a,
                            int lda, const void* b, int ldb, float beta, float* c, int ldc);

Bf16GemmFn mkl_symbol() {
  static const auto fn = reinterpret_cast<Bf16GemmFn>(dlsym(RTLD_DEFAULT, "cblas_gemm_bf16bf16f32"));
  return fn;
}

int as_int(int64_t v) {
  SPMD_ASSERT(v >= 0 && v <= INT_MAX, "bf16 gemm: dimension {} does not fit MKL's 32-bit integers", v);
  return static_cast<int>(v);
}

}  // namespace

bool mkl_bf16_gemm_loaded() { return mkl_symbol() != nullptr; }

// MKL runs its bf16 kernels on Intel CPUs only: on an AMD EPYC Zen 4 (AVX512_BF16) its
// gemm_bf16bf16f32 ran at float32 speed, 1.6-2.6x slower than oneDNN's bf16 product plus the
// float32 add it would replace (bench/bf16_weight_grad.py; bench/NOTES.md). There that pair stays.
bool has_bf16_gemm() {
  static const bool intel = cpu_vendor() == "GenuineIntel";
  return intel && mkl_bf16_gemm_loaded() && !detail::aten_gemm_forced();
}

void bf16_accumulate_weight_grad(const at::Tensor& dw, const at::Tensor& x, const at::Tensor& dy) {
  Bf16GemmFn gemm = mkl_symbol();
  SPMD_ASSERT(gemm, "bf16_accumulate_weight_grad: MKL's gemm_bf16bf16f32 is not available");
  SPMD_ASSERT(dw.scalar_type() == at::kFloat && x.scalar_type() == at::kBFloat16 &&
                  dy.scalar_type() == at::kBFloat16 && x.dim() == 2 && dy.dim() == 2 && x.size(0) == dy.size(0) &&
                  dw.size(0) == x.size(1) && dw.size(1) == dy.size(1),
              "bf16_accumulate_weight_grad: unsupported operands dw {} {} x {} {} dy {} {}", dw.sizes().vec(),
              c10::toString(dw.scalar_type()), x.sizes().vec(), c10::toString(x.scalar_type()), dy.sizes().vec(),
              c10::toString(dy.scalar_type()));
  const bool transposed = !dw.is_contiguous();
  SPMD_ASSERT(!transposed || dw.t().is_contiguous(), "bf16_accumulate_weight_grad: dw is neither (K, N) nor (N, K)^T");
  const at::Tensor xc = x.contiguous(), dyc = dy.contiguous();
  const int rows = as_int(x.size(0)), K = as_int(x.size(1)), N = as_int(dy.size(1));
  if (rows == 0) return;
  if (!transposed)  // dw (K, N) += x^T (K, rows) dy (rows, N)
    gemm(kRowMajor, kTrans, kNoTrans, K, N, rows, 1.f, xc.const_data_ptr(), K, dyc.const_data_ptr(), N, 1.f,
         dw.data_ptr<float>(), N);
  else  // dw^T (N, K) += dy^T (N, rows) x (rows, K)
    gemm(kRowMajor, kTrans, kNoTrans, N, K, rows, 1.f, dyc.const_data_ptr(), N, xc.const_data_ptr(), K, 1.f,
         dw.data_ptr<float>(), K);
}

}  // namespace spmd::kernels::cpu
