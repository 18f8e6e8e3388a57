// Llama forward: token embeddings, n_layer pre-norm blocks (RMSNorm, rotary grouped-query
// attention, RMSNorm, SwiGLU MLP), final RMSNorm, head. Shapes: B batch rows on this rank, T
// sequence, C embed, H query heads and Hkv key/value heads on this rank, D head dim.
#include "model/llama.h"

#include <ATen/record_function.h>
#include <fmt/format.h>

#include "model/grouped_query.h"
#include "model/rope.h"
#include "model/sparse_mlp.h"

namespace spmd {

Llama::Llama(const ModelConfig& config) : Model(config), inverse_frequencies_(rope_inverse_frequencies(config)) {}

at::Tensor Llama::attention(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training, KvCache* cache,
                            const at::Tensor& document_starts) const {
  const std::string p = fmt::format("h.{}.attn", layer);
  // q, k, v in one product: (B, T, H + 2 Hkv, D), this rank's query heads, then key, then value heads.
  at::Tensor qkv = ops.dense_concat(x, {p + ".q.weight", p + ".k.weight", p + ".v.weight"}, 1);
  const int64_t Hkv = qkv.size(2) / (config_.n_head / config_.kv_heads() + 2), H = qkv.size(2) - 2 * Hkv;
  if (config_.qk_norm) {  // Qwen3: each query and key head RMS-normed before the rotation
    qkv = at::cat({ops.rms_norm(qkv.narrow(2, 0, H), p + ".q_norm.weight", config_.rms_norm_eps),
                   ops.rms_norm(qkv.narrow(2, H, Hkv), p + ".k_norm.weight", config_.rms_norm_eps),
                   qkv.narrow(2, H + Hkv, Hkv)},
                  2);
  }
  // Each position rotated by its true place: context-parallel chunks and packed documents too.
  const RopeAngles angles =
      rope_angles(ops.positions(qkv.size(1), cache ? cache->length : 0, document_starts), inverse_frequencies_);
  const bool drop = training && config_.dropout > 0;
  at::Tensor y;
  if (cache) {  // the cache holds the Hkv key/value heads
    const at::Tensor q = ops.rotary(qkv.narrow(2, 0, H), angles.cos, angles.sin);
    cache->append(layer, ops.rotary(qkv.narrow(2, H, Hkv), angles.cos, angles.sin), qkv.narrow(2, H + Hkv, Hkv));
    const size_t l = static_cast<size_t>(layer);
    y = ops.attention_over_prefix(q, repeat_kv(cache->keys[l], H), repeat_kv(cache->values[l], H));
  } else {  // (B, T, H, D)
    y = ops.rotary_attention(qkv, Hkv, angles.cos, angles.sin, drop ? p + ".attn_dropout" : "", document_starts);
  }
  y = ops.dense(y, p + ".o.weight", "", 2);  // (B, T, C)
  if (drop) y = ops.dropout(y, p + ".resid_dropout", kResidualAxes);
  return y;
}

at::Tensor Llama::mlp(const at::Tensor& x, int64_t layer, ModelOps& ops, bool training) const {
  const std::string p = fmt::format("h.{}.mlp", layer);
  at::Tensor y;  // (B, T, C)
  if (config_.moe.sparse_layer(layer)) {
    y = sparse_mlp(config_, x, layer, ops);
  } else {  // gate and up in one product: (B, T, 2 F)
    const at::Tensor gate_up = ops.dense_concat(x, {p + ".gate.weight", p + ".up.weight"}, 1);
    y = ops.dense(ops.swiglu(gate_up), p + ".down.weight", "", 1);
  }
  if (training && config_.dropout > 0) y = ops.dropout(y, p + ".resid_dropout", kResidualAxes);
  return y;
}

at::Tensor Llama::embed(const at::Tensor& idx, ModelOps& ops, bool training, int64_t /*first_position*/,
                        const at::Tensor& /*document_starts*/) const {
  RECORD_USER_SCOPE("embed");  // the census's region (lib/census)
  at::Tensor x = ops.constrain(ops.embed("wte", idx), kResidualAxes);  // (B, T, C): the residual stream's layout
  if (training && config_.dropout > 0) x = ops.dropout(x, "embed_dropout", kResidualAxes);
  return x;
}

at::Tensor Llama::block(const at::Tensor& x, int64_t l, ModelOps& ops, bool training, KvCache* cache,
                        const at::Tensor& document_starts) const {
  const double eps = config_.rms_norm_eps;
  const auto [residual, attn_norm] = ops.add_rms_norm(x, at::Tensor(), fmt::format("h.{}.attn_norm.weight", l), eps);
  const at::Tensor a = attention(attn_norm, l, ops, training, cache, document_starts);
  const auto [h, mlp_norm] = ops.add_rms_norm(residual, a, fmt::format("h.{}.mlp_norm.weight", l), eps);
  return h + mlp(mlp_norm, l, ops, training);
}

at::Tensor Llama::final_norm(const at::Tensor& x, ModelOps& ops) const {
  return ops.add_rms_norm(x, at::Tensor(), "ln_f.weight", config_.rms_norm_eps).normed;
}

}  // namespace spmd
