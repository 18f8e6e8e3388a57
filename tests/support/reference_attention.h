// The plain libtorch causal attention the kernels are checked against (test_fused_attention,
// test_kernels_dispatch, test_document_mask): (B, T, 3, H, D) -> (B, T, H, D), probabilities times
// `mask` if given. `visible`: undefined (causal), or an explicit (B, T, T) bool mask of the keys
// each query sees (packed documents: block-diagonal causal).
#pragma once
#include <cmath>

#include <ATen/ATen.h>

namespace spmd::test {

inline at::Tensor reference_attention(const at::Tensor& qkv, const at::Tensor& mask,
                                      const at::Tensor& visible = at::Tensor()) {
  const int64_t T = qkv.size(1), D = qkv.size(4);
  at::Tensor q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2), v = qkv.select(2, 2).transpose(1, 2);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
  at::Tensor hidden = visible.defined() ? (~visible).unsqueeze(1) : at::ones({T, T}, qkv.options().dtype(at::kBool)).triu(1);
  at::Tensor probs = at::softmax(scores.masked_fill(hidden, -INFINITY), -1);
  if (mask.defined()) probs = probs * mask;
  return at::matmul(probs, v).transpose(1, 2);
}

}  // namespace spmd::test
