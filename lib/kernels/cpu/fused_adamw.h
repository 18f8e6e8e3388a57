// AdamW's whole update in one pass over float32 CPU tensors (p, g, m, v read once; p, m, v
// written once), where the op-by-op libtorch form makes about eight. Same operations, same order,
// so both give the same numbers. Callers outside lib/kernels use kernels::adamw_update.
#pragma once
#include <ATen/ATen.h>

#include "kernels/kernels.h"

namespace spmd::kernels::cpu {

// Whether fused_adamw_update takes these tensors: all float32, contiguous, on CPU.
bool fused_adamw_supports(const at::Tensor& p, const at::Tensor& g, const at::Tensor& m, const at::Tensor& v);

// kernels::adamw_update for tensors fused_adamw_supports takes.
void fused_adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, const AdamWScalars& s);

}  // namespace spmd::kernels::cpu
