// GPT-2 forward: embeddings, n_layer pre-LN blocks (causal attention + GELU MLP), tied LM head.
// Shapes: B batch rows on this rank, T sequence, C embed, H heads on this rank, D head dim.
#include "model/gpt2.h"

#include <cmath>

#include <fmt/format.h>

#include "model/fused_attention.h"
#include "model/fused_gelu.h"

namespace spmd {

namespace {
const std::vector<std::string> kResidual{"batch", "seq", "embed"};
}  // namespace

at::Tensor Gpt2::layer_norm(const at::Tensor& x, const std::string& prefix, ModelOps& ops) const {
  return ops.layer_norm(x, prefix + ".weight", config_.bias ? prefix + ".bias" : "", 1e-5);
}

at::Tensor Gpt2::attention(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const {
  const std::string p = fmt::format("h.{}.attn", layer);
  at::Tensor qkv = ops.dense(x, p + ".c_attn.weight", config_.bias ? p + ".c_attn.bias" : "", 1);  // (B, T, 3, H, D)
  const bool drop = training && config_.dropout > 0;
  const std::vector<std::string> probs_logical{"batch", "heads", "seq", ""};
  at::Tensor y;  // (B, T, H, D)
  if (fused_attention_supports(qkv)) {
    // The dropout mask is ops.dropout of ones: the same multipliers the unfused path applies.
    const int64_t B = qkv.size(0), T = qkv.size(1), H = qkv.size(3);
    at::Tensor mask = drop ? ops.dropout(at::ones({B, H, T, T}, qkv.options()), p + ".attn_dropout", probs_logical)
                           : at::Tensor();
    y = fused_causal_attention(qkv, mask);
  } else {
    const int64_t T = qkv.size(1), D = qkv.size(4);
    at::Tensor q = qkv.select(2, 0).transpose(1, 2);  // (B, H, T, D)
    at::Tensor k = qkv.select(2, 1).transpose(1, 2);
    at::Tensor v = qkv.select(2, 2).transpose(1, 2);
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));  // (B, H, T, T)
    at::Tensor causal = at::ones({T, T}, x.options().dtype(at::kBool)).triu(1);
    at::Tensor probs = at::softmax(scores.masked_fill(causal, -INFINITY), -1);
    if (drop) probs = ops.dropout(probs, p + ".attn_dropout", probs_logical);
    y = at::matmul(probs, v).transpose(1, 2);
  }
  y = ops.dense(y, p + ".c_proj.weight", config_.bias ? p + ".c_proj.bias" : "", 2);  // (B, T, C)
  if (drop) y = ops.dropout(y, p + ".resid_dropout", kResidual);
  return y;
}

at::Tensor Gpt2::mlp(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const {
  const std::string p = fmt::format("h.{}.mlp", layer);
  // GELU with GPT-2's tanh approximation; the bias is added inside the fused GELU when it can be.
  at::Tensor h = ops.dense(x, p + ".c_fc.weight", "", 1);  // (B, T, 4C)
  at::Tensor bias = config_.bias ? ops.param(p + ".c_fc.bias") : at::Tensor();
  h = fused_gelu_supports(h) ? fused_bias_gelu(h, bias) : at::gelu(bias.defined() ? h + bias : h, "tanh");
  at::Tensor y = ops.dense(h, p + ".c_proj.weight", config_.bias ? p + ".c_proj.bias" : "", 1);   // (B, T, C)
  if (training && config_.dropout > 0) y = ops.dropout(y, p + ".resid_dropout", kResidual);
  return y;
}

at::Tensor Gpt2::loss(const at::Tensor& idx, const at::Tensor& targets, ModelOps& ops, bool training) const {
  const int64_t T = idx.size(1);
  at::Tensor x = ops.embed("wte", idx) + ops.param("wpe").narrow(0, 0, T);  // (B, T, C)
  if (training && config_.dropout > 0) x = ops.dropout(x, "embed_dropout", kResidual);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    x = ops.constrain(x, kResidual);
    x = x + attention(layer_norm(x, fmt::format("h.{}.ln_1", l), ops), l, ops, training);
    x = x + mlp(layer_norm(x, fmt::format("h.{}.ln_2", l), ops), l, ops, training);
  }
  x = layer_norm(ops.constrain(x, kResidual), "ln_f", ops);
  return ops.tied_head_loss(x, "wte", targets);
}

}  // namespace spmd
