// Dropout by its draws on the CPU: x * M in one pass, M drawn row by row where it is applied
// (kernels/dropout_draws.h), and the gradient g * M from M drawn again in backward, so nothing of
// x's size is kept for backward (x * mask keeps the mask). The same bits as x * draws.materialize().
// Callers outside lib/kernels use kernels::dropout (kernels/kernels.h).
#pragma once
#include <ATen/ATen.h>

#include "kernels/dropout_draws.h"

namespace spmd::kernels::cpu {

// Whether fused_dropout takes x (float32 or bf16 on CPU) with `draws` (a block of x's shape).
bool fused_dropout_supports(const at::Tensor& x, const DropoutDraws& draws);

// x * M for M the draws' multipliers (0 or 1/(1-p)), autograd-aware; float32 out (a bf16 x
// promotes, as x * mask does), the gradient in x's dtype.
at::Tensor fused_dropout(const at::Tensor& x, const DropoutDraws& draws);

}  // namespace spmd::kernels::cpu
