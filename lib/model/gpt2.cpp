// GPT-2 forward: embeddings, n_layer pre-LN blocks (causal attention + GELU MLP), tied LM head.
// Shapes: B batch rows on this rank, T sequence, C embed, H heads on this rank, D head dim.
#include "model/gpt2.h"

#include <ATen/record_function.h>
#include <fmt/format.h>

namespace spmd {

ModelOps::AddNormed Gpt2::add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const std::string& prefix,
                                         ModelOps& ops) const {
  return ops.add_layer_norm(x, delta, prefix + ".weight", config_.bias ? prefix + ".bias" : "", 1e-5);
}

at::Tensor Gpt2::attention(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                           const at::Tensor& document_starts) const {
  const std::string p = fmt::format("h.{}.attn", layer);
  at::Tensor qkv = ops.dense(x, p + ".c_attn.weight", config_.bias ? p + ".c_attn.bias" : "", 1);  // (B, T, 3, H, D)
  const bool drop = training && config_.dropout > 0;
  at::Tensor y = cache ? cached_attention(qkv, layer, ops, *cache)
                       : ops.causal_attention(qkv, drop ? p + ".attn_dropout" : "", document_starts);  // (B, T, H, D)
  y = ops.dense(y, p + ".c_proj.weight", config_.bias ? p + ".c_proj.bias" : "", 2);  // (B, T, C)
  if (drop) y = ops.dropout(y, p + ".resid_dropout", kResidualAxes);
  return y;
}

at::Tensor Gpt2::cached_attention(const at::Tensor& qkv, int64_t layer, ModelOps& ops, KvCache& cache) const {
  cache.append(layer, qkv.select(2, 1), qkv.select(2, 2));  // (B, T, H, D) of the new positions
  const size_t l = static_cast<size_t>(layer);
  return ops.attention_over_prefix(qkv.select(2, 0), cache.keys[l], cache.values[l]);
}

at::Tensor Gpt2::mlp(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const {
  const std::string p = fmt::format("h.{}.mlp", layer);
  // The c_fc bias rides in the fused GELU pass (a CPU) or in the product (the GPU's path).
  const at::Tensor h = ops.dense_gelu(x, p + ".c_fc.weight", config_.bias ? p + ".c_fc.bias" : "");  // (B, T, 4C)
  at::Tensor y = ops.dense(h, p + ".c_proj.weight", config_.bias ? p + ".c_proj.bias" : "", 1);   // (B, T, C)
  if (training && config_.dropout > 0) y = ops.dropout(y, p + ".resid_dropout", kResidualAxes);
  return y;
}

at::Tensor Gpt2::embed(const at::Tensor& idx, ModelOps& ops, bool training, int64_t first_position,
                       const at::Tensor& document_starts) const {
  RECORD_USER_SCOPE("embed");  // the census's region (lib/census)
  const int64_t T = idx.size(1);
  at::Tensor positions;  // (B, T, C) rows of wpe, or (T, C) when every row counts from first_position
  if (document_starts.defined()) {
    const at::Tensor in_document = at::arange(T, document_starts.options()) - document_starts;  // (B, T)
    positions = at::embedding(ops.param("wpe"), in_document);
  } else {
    positions = ops.param("wpe").narrow(0, first_position, T);
  }
  at::Tensor x = ops.embed("wte", idx) + positions;  // (B, T, C)
  x = ops.constrain(x, kResidualAxes);  // the residual stream's layout from here on
  if (training && config_.dropout > 0) x = ops.dropout(x, "embed_dropout", kResidualAxes);
  return x;
}

at::Tensor Gpt2::block(const at::Tensor& x, int64_t l, ModelOps& ops, bool training, KvCache* cache,
                       const at::Tensor& document_starts) const {
  const auto [residual, ln_1] = add_layer_norm(x, at::Tensor(), fmt::format("h.{}.ln_1", l), ops);
  const at::Tensor a = attention(ln_1, l, ops, training, cache, document_starts);
  const auto [h, ln_2] = add_layer_norm(residual, a, fmt::format("h.{}.ln_2", l), ops);
  return h + mlp(ln_2, l, ops, training);
}

at::Tensor Gpt2::final_norm(const at::Tensor& x, ModelOps& ops) const {
  return add_layer_norm(x, at::Tensor(), "ln_f", ops).normed;
}

}  // namespace spmd
