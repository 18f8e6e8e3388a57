// bf16 x bf16 -> float32 matrix products on the CPU: MKL's gemm_bf16bf16f32, which the torch wheel's
// libtorch carries on x86 (AVX512_BF16 / AMX kernels on Intel CPUs that have them). It accumulates in
// float32 into a float32 C with beta, so a weight gradient summed over chunks of rows needs neither
// a bf16 product the size of the weight nor a pass to add it (libtorch's CPU mm returns bf16 only).
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

namespace spmd::kernels::cpu {

// Whether kernels::accumulate_weight_grad calls MKL's gemm_bf16bf16f32: on Intel CPUs with a
// libtorch that carries MKL, unless detail::force_aten_gemm (not on AMD, where MKL runs it at
// float32 speed; not on aarch64).
bool has_bf16_gemm();
// Whether this libtorch carries the function at all (any x86 CPU: tests check its sums everywhere).
bool mkl_bf16_gemm_loaded();

// dw += x^T dy in float32: dw (K, N) float32, contiguous or the transpose of a contiguous (N, K)
// (a tied table), written in its own layout; x (rows, K) and dy (rows, N) bf16. Needs
// mkl_bf16_gemm_loaded().
void bf16_accumulate_weight_grad(const at::Tensor& dw, const at::Tensor& x, const at::Tensor& dy);

}  // namespace spmd::kernels::cpu
