// A dense layer on CPU as one autograd node: y = x W (+ b), with the forward product and both
// backward products (dX = dY W^T, dW = X^T dY) each split over the intra-op threads by rows or
// columns, every thread running a single-threaded sgemm (cpu::parallel_gemm). On two cores this
// beats the BLAS's own threading of these small matrices, which spends a pass zeroing C and
// hands off threads inside every call. test_fused_linear checks it against at::mm/at::addmm.
#pragma once
#include <string>

#include <ATen/ATen.h>

namespace spmd {

// Whether fused_linear takes (x, w): float32 CPU matrices, w row-major or the transpose of a
// row-major matrix, and the process's BLAS sgemm found. Otherwise use at::mm / at::addmm.
bool fused_linear_supports(const at::Tensor& x, const at::Tensor& w);

// x: (rows, K); w: (K, N), contiguous or w.t() contiguous (a tied (N, K) embedding as the LM
// head); bias: (N) or undefined. Returns (rows, N).
at::Tensor fused_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = at::Tensor());

// x w (+ bias) through fused_linear where it takes the operands, else libtorch's at::mm /
// at::addmm and their autograd (another device or dtype). With an `operand_dtype` other than x's
// (bfloat16: model.matmul_dtype), the product takes operands rounded to it and returns x's dtype:
// libtorch's mm accumulates in float32 (oneDNN's bf16 GEMM on CPUs with AVX-512 BF16, cuBLAS on
// GPUs) and rounds its output to bfloat16, as CPU/GPU autocast does; the backward products
// likewise. The bias is added in x's dtype.
at::Tensor dense_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = at::Tensor(),
                         at::ScalarType operand_dtype = at::kFloat);

// The operand dtype a model.matmul_dtype names ("float32", "bfloat16").
at::ScalarType matmul_operand_dtype(const std::string& name);

// The same products without autograd, for nodes with their own backward (an FSDP layer gathers
// its weight again there instead of keeping it). Any x (rows, K) and w (K, N): parallel_gemm
// where fused_linear_supports(x, w), at::mm / at::addmm otherwise. bias may be undefined;
// operand_dtype as in dense_product.
at::Tensor linear_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                          at::ScalarType operand_dtype = at::kFloat);
struct LinearGrads {
  at::Tensor dx, dw, dbias;  // undefined where not asked for; dw has w's layout
};
LinearGrads linear_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& dy, bool need_dx,
                            bool need_dw, bool need_dbias, at::ScalarType operand_dtype = at::kFloat);

}  // namespace spmd
