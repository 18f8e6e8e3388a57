// What a model family's code may ask of the runtime. The model speaks logical axis names and parameter
// names only; an implementation decides what communication that needs (lib/parallel).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace spmd {

class ModelOps {
 public:
  virtual ~ModelOps() = default;

  // The parameter as this rank computes with it (FSDP shards gathered; tensor-parallel dims
  // stay local).
  virtual at::Tensor param(const std::string& name) = 0;
  virtual bool has_param(const std::string& name) const = 0;

  // y = x . W (+ b), contracting the last `contracted_dims` dims of x with the first of W.
  virtual at::Tensor dense(const at::Tensor& x, const std::string& weight, const std::string& bias,
                           int64_t contracted_dims) = 0;

  // The products of x with each of `weights` (as dense, no bias), concatenated along the weights'
  // first output dim (their other output dims alike): the projections that read one input, e.g.
  // q, k and v (C, H, D), (C, Hkv, D) -> (B, T, H + 2 Hkv, D). One product where the runtime can
  // (one pass over x, one wider matrix); by default each dense, then cat.
  virtual at::Tensor dense_concat(const at::Tensor& x, const std::vector<std::string>& weights,
                                  int64_t contracted_dims);

  // LayerNorm over x's last dim with the named scale and bias ("" for none). The norms compute in
  // float32 and return the matmul operand dtype (model.matmul_dtype: their output feeds matmuls).
  virtual at::Tensor layer_norm(const at::Tensor& x, const std::string& weight, const std::string& bias,
                                double eps) = 0;

  // RMSNorm over x's last dim with the named scale (statistics in float32).
  virtual at::Tensor rms_norm(const at::Tensor& x, const std::string& weight, double eps) = 0;

  // The residual stream after a block's branch and the norm that reads it next: sum = x + delta
  // (float32; delta undefined: x itself) and normed = LayerNorm(sum) (add_rms_norm: RMSNorm) in
  // the matmul operand dtype: by default `x + delta` then layer_norm (rms_norm); one op where the
  // runtime has one. The caller goes on with `sum`, not x: the norm's gradient then joins the
  // residual's inside the op.
  struct AddNormed {
    at::Tensor sum, normed;
  };
  virtual AddNormed add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const std::string& weight,
                                   const std::string& bias, double eps) {
    const at::Tensor sum = delta.defined() ? x + delta : x;
    return {sum, layer_norm(sum, weight, bias, eps)};
  }
  virtual AddNormed add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const std::string& weight,
                                 double eps) {
    const at::Tensor sum = delta.defined() ? x + delta : x;
    return {sum, rms_norm(sum, weight, eps)};
  }

  // The true positions of the `length` sequence positions this rank's attention inputs hold
  // (rotary embeddings): (1, length) int64 counting from first_position, the positions of this
  // rank's head-tail chunks under context parallelism; with document_starts ((B, T) over the whole
  // sequence, as causal_attention takes them) (B, length), counted from each token's document start.
  virtual at::Tensor positions(int64_t length, int64_t first_position, const at::Tensor& document_starts) = 0;

  // Rows of an embedding table (vocab, embed) for token ids (B, T) -> (B, T, C).
  virtual at::Tensor embed(const std::string& table, const at::Tensor& ids) = 0;

  // Mean cross-entropy of logits x . table^T over this rank's tokens; padded vocab rows excluded.
  virtual at::Tensor tied_head_loss(const at::Tensor& x, const std::string& table, const at::Tensor& targets) = 0;

  // Evaluation (no gradients): each row's summed cross-entropy of x . table^T over the positions
  // whose target is not negative, targets (B, T) being the whole sequence's: (B,) float, whole on
  // every rank however the sequence is split.
  virtual at::Tensor tied_head_row_losses(const at::Tensor& x, const std::string& table, const at::Tensor& targets) = 0;

  // Logits of x (B, C) against the whole (unpadded) vocabulary of the tied table: (B, vocab).
  virtual at::Tensor tied_head_logits(const at::Tensor& x, const std::string& table) = 0;

  // Causal self-attention of qkv (B, T, 3, H, D) -> (B, T, H, D): softmax(Q K^T / sqrt(D) + causal)
  // V, the probabilities (logical: batch, heads, seq, seq) passed through dropout at
  // `dropout_site`; "" for no dropout (evaluation, or dropout 0). document_starts: undefined, or
  // (B, T) int64 over the whole sequence (logical: batch, seq), where each position's document
  // starts: a query then sees only the keys of its own document.
  virtual at::Tensor causal_attention(const at::Tensor& qkv, const std::string& dropout_site,
                                      const at::Tensor& document_starts) = 0;

  // Decoding with a key/value cache: queries q (B, T, H, D) for the last T of the S positions
  // whose keys and values k, v (B, S, H, D) hold -> (B, T, H, D). No dropout.
  virtual at::Tensor attention_over_prefix(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) = 0;

  // Rotary embeddings: x (B, T, H, D) rotated by angles whose cos and sin are float32 (P, T, 1, D)
  // (model/rope.h), in float32, returned in x's dtype. By default rope.h's apply_rope.
  virtual at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

  // Rotary grouped-query causal attention of qkv (B, T, H + 2 Hkv, D) (query heads, key heads,
  // value heads along dim 2, as dense_concat of the q, k, v projections gives them): the query and
  // key heads rotated by the angles (as rotary), then causal attention (as causal_attention,
  // dropout and document starts included) in which query head i reads key/value head
  // i / (H / Hkv) -> (B, T, H, D). By default rotary on each, the key/value heads repeated
  // (model/grouped_query.h), stacked and causal_attention; a runtime with a kernel that reads each
  // key/value head for its query heads uses it.
  virtual at::Tensor rotary_attention(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos,
                                      const at::Tensor& sin, const std::string& dropout_site,
                                      const at::Tensor& document_starts);

  // Llama's SwiGLU of gate_up (..., 2 F) = [gate | up] along the last dim (dense_concat of the
  // gate and up projections): silu(gate) * up -> (..., F), in the input's dtype (bf16 between bf16
  // matmuls).
  virtual at::Tensor swiglu(const at::Tensor& gate_up) = 0;

  // A sparse layer's routed experts (docs/experts.md): each token of x (B, T, C) (the matmul
  // operand dtype) goes to the experts in `choice` (B, T, k) int64, and their outputs are summed
  // with `weights` (B, T, k) float32 -> (B, T, C) float32. The experts are SwiGLUs stacked on a
  // leading `expert` dim: `prefix`.gate and .up (E, C, I), .down (E, I, C). By default the experts
  // this process holds, rows grouped by expert (one product each); the runtime sends each token to
  // the rank holding its expert and back.
  virtual at::Tensor routed_experts(const at::Tensor& x, const at::Tensor& choice, const at::Tensor& weights,
                                    const std::string& prefix);

  // The load-balancing loss's hook for sparse layer `layer`: records its routing (probs (N, E)
  // float32, choice (N, k)) and returns y, through whose backward the balancing loss's gradient
  // reaches the router. By default y as it is (evaluation, sampling: no balancing loss).
  virtual at::Tensor balance_experts(const at::Tensor& y, int64_t /*layer*/, const at::Tensor& /*probs*/,
                                     const at::Tensor& /*choice*/) {
    return y;
  }

  // GPT-2's tanh-approximate GELU of h + the named bias ("" for none) over h's last dim.
  virtual at::Tensor bias_gelu(const at::Tensor& h, const std::string& bias) = 0;

  // GELU(x . W + b) (tanh-approximate; bias "" for none): by default the product, then bias + GELU
  // as one pass (bias_gelu); where the runtime's products take the bias more cheaply, in them.
  virtual at::Tensor dense_gelu(const at::Tensor& x, const std::string& weight, const std::string& bias) {
    return bias_gelu(dense(x, weight, "", 1), bias);
  }

  // Dropout whose mask is a function of (seed, step, site, global element index); `logical`
  // names x's dims so the global index can be known.
  virtual at::Tensor dropout(const at::Tensor& x, const std::string& site, const std::vector<std::string>& logical) = 0;

  // One block of the `layers` stack: body(x). The runtime may keep only x for backward and run
  // body again there (runtime.remat: full); body must not capture anything that dies before the
  // backward.
  virtual at::Tensor block(const at::Tensor& x, std::function<at::Tensor(const at::Tensor&)> body) = 0;

  // with_sharding_constraint: x should have the layout the rules give `logical`.
  virtual at::Tensor constrain(const at::Tensor& x, const std::vector<std::string>& logical) = 0;
};

}  // namespace spmd
