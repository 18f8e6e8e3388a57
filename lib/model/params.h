// A model family's parameters as a table: name, global shape, logical axes, initializer. No
// tensors here. Everything that shards, stages, checkpoints or counts parameters works on this
// table and never names the family: param_table and its neighbours dispatch on model.arch.
// Weights are stored input-major (x @ W) and attention tensors have separate (heads, head_dim)
// dims so that sharding `heads` always splits whole heads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "mesh/size_hint.h"

namespace spmd {

enum class ParamInit { kNormal, kZeros, kOnes };

struct ParamInfo {
  std::string name;                  // h.0.attn.c_attn.weight
  std::vector<int64_t> shape;        // global shape
  std::vector<std::string> logical;  // one logical axis per dim; "" = never sharded
  ParamInit init = ParamInit::kNormal;
  double init_std = 0.02;            // for kNormal
  bool weight_decay = false;         // AdamW decay: weight matrices and embeddings only (as nanoGPT)
  int64_t input_dims = 0;            // for dense weights: leading dims contracted with the input
  int64_t padded_dim = -1;           // a dim padded up so it shards evenly (the vocab); -1: none
  int64_t unpadded_size = 0;         // that dim's true size: entries past it are zero padding
  // Where the forward uses it along the logical `layers` axis (the stack of blocks): block
  // `layer`, or (layer -1) before the stack (embeddings) and/or after it (final norm, head).
  int64_t layer = -1;
  bool before_stack = false;
  bool after_stack = false;
  // Applied position by position to the residual stream (LayerNorm scales and shifts, the biases
  // added to it): where the stream is split along the sequence, each split sees only its positions.
  bool per_position = false;
  // Applied to every attention head alike (Qwen3's per-head query/key norms): where the heads are
  // split, each split's gradient is a partial sum over its heads.
  bool per_head = false;
  // false: not the optimizer's to update but set by a rule after each step (the experts' choice
  // bias of auxiliary-loss-free balancing, docs/experts.md).
  bool trained = true;
};

// Logical axis vocabulary of the models (activations and parameters); every family uses these.
inline const std::vector<std::string>& model_logical_names() {
  static const std::vector<std::string> names{"batch", "seq", "vocab", "embed", "heads", "kv", "mlp", "layers",
                                              "expert"};
  return names;
}

// All parameters of config.arch's family in a fixed order. `padded_vocab` >= config.vocab_size
// rows of the embedding (and of an untied head).
std::vector<ParamInfo> param_table(const ModelConfig& config, int64_t padded_vocab);

// Which config key sets each logical axis's size (for layout errors that name the fix). A logical
// axis may have several sources (llama's `heads`: n_head and n_kv_head); a message names the one
// whose size is the indivisible dim's.
std::vector<SizeSource> size_sources(const ModelConfig& config);

// Number of parameters excluding padding; position embeddings (GPT-2's wpe) only when asked.
int64_t num_params(const ModelConfig& config, bool include_position_embedding = true);

// Layer 0's dense weights by role, read off the table's logical axes (the memory estimate and
// the step cost size a block from them without naming a family): attention's input projections
// (embed -> heads), its output (heads -> embed), the MLP's input projections (embed -> mlp; two
// when gated) and its output (mlp -> embed).
struct BlockWeights {
  std::vector<const ParamInfo*> attention_in, attention_out, mlp_in, mlp_out;
  std::vector<const ParamInfo*> all() const;
};
BlockWeights block_weights(const std::vector<ParamInfo>& table);

// What a family's elementwise ops keep for backward beside the dense layers' inputs (the memory
// estimate's model; per token, in float32 numbers): each norm's kept copies of the stream and
// statistics, and the MLP activation's kept hidden-width tensors.
struct ActivationTraits {
  int64_t norm_streams = 0;  // LayerNorm 0; RMSNorm 1 (its normalized input, for the scale's gradient)
  int64_t norm_stats = 2;    // LayerNorm mean and rstd; RMSNorm rstd
  int64_t mlp_hidden = 1;    // bias+GELU its derivative; SwiGLU gate, silu(gate) and up
};
ActivationTraits activation_traits(const ModelConfig& config);

// The table's name of the LM head's (vocab, embed) matrix: wte when tied, else lm_head.
inline std::string head_table(const ModelConfig& config) { return config.tie_embeddings ? "wte" : "lm_head"; }

}  // namespace spmd
