// Memory estimate: exact for parameter-shaped state, a model of saved activations otherwise.
//
// The activation model is what the runtime's autograd graph keeps between a microbatch's forward
// and its backward (the bytes spmd-train reports as summary.json's graph_bytes), op by op, with
// B rows, T positions, C = n_embd; per device H' heads and an F' MLP width (heads / mlp tensor
// parallel), V' logit columns (vocab tensor parallel), and the residual stream's T' = T / s
// positions (sequence parallelism over s devices; s = 1 without). Under context parallelism over
// c devices every activation holds T / c positions (B, T below stand for the device's tokens),
// attention's probabilities are (B, H', T/c, T) and it keeps the gathered keys and values (B, T,
// 2C') and, with dropout, the dropped probabilities beside the mask (selective recomputation
// replays all three, the mask included). Dropout masks are kept only where they are tensors, on a
// GPU and under context parallelism; on a CPU the fused kernels draw them again in backward:
//   embeddings   the stream (B, T', C); with a tensor-parallel vocab dim (any size) the masked ids
//                (int64) and the mask (float) of (B, T); dropout's mask (B, T', C)
//   layer norm   its input (kept anyway as the stream), mean and rstd (B, T'); RMSNorm (llama) rstd
//                (B, T') and its normalized input (B, T', C) (the scale's gradient needs it), fp32;
//                on a CPU the fused residual RMSNorm its rstd only (kernels/cpu/fused_rms_norm.h)
//   dense        its input, in the matmul operand dtype (model.matmul_dtype: bf16 activations
//                between matmuls, as autocast; the norm's output is already bf16, so the layers
//                that read it share it); a column-parallel layer under tensor parallelism casts its
//                own (collectives carry fp32), and under sequence parallelism keeps the gathered
//                (B, T, C), not the slice; bf16 also keeps a bf16 copy of the weight shard (cast
//                once per step), except an FSDP layer, which casts its gather
//   attention    the fused kernel keeps qkv (B, T, 3C', operand dtype) and the probabilities
//                (B, H', T, T); its output is c_proj's input; dropout's mask (B, H', T, T)
//   bias+GELU    its derivative (B, T, F') in the operand dtype; its output is c_proj's input;
//                SwiGLU (llama) keeps gate, silu(gate) and up (B, T, F') in the operand dtype (on a
//                CPU the fused kernel gate and up only); its output is down's input
//   rotary       its angles only (T, D), not counted; grouped-query attention repeats the key/value
//                heads before the kernel, which then keeps qkv of H' heads as GPT-2's; the CPU's
//                fused kernel reads them unrepeated and keeps H' + 2 Hkv' heads (kernels.h,
//                grouped_causal_attention)
//   residual     each add's output (B, T', C) (the next layer norm's input); the dropout masks
//   head         the loss runs the LM head in chunks of rows and makes its gradients in forward:
//                it keeps the gradient of its input (B*T, C) fp32 and of the table (V', C) fp32
//                (the FSDP shard's), nothing of the logits; ln_f's mean and rstd
// runtime.remat full keeps only each block's input (its output is the next block's input);
// selective drops the probabilities (qkv is kept as the recomputation's input) and the attention
// dropout mask (drawn in the replay); the GELU is not recomputed. The loss's
// chunk of logits is a working set at the forward's end, when every activation is held, as at
// the first backward's start: the working set is the wider of it and the widest backward op's.
// Optimizer state: AdamW's m and v per parameter; under train.optimizer muon, one momentum buffer
// per Muon matrix (the blocks' dense weights) and AdamW's two for the rest.
// Sparse layers (model.moe): the MLP's terms are the routed experts' (inspect/expert_memory.h: the
// router's, k routed rows per token through the device's experts, the mixing's), and a backward
// holds their hidden gradients and, under expert parallelism, the exchanged gradient sent and
// received; an expert weight counts where it is held (its shard of the `expert` dim).
#include "inspect/memory_estimate.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "inspect/expert_memory.h"
#include "kernels/cpu/cpu_features.h"
#include "model/params.h"
#include "muon/takes_muon.h"
#include "parallel/head_chunks.h"
#include "parallel/pipeline_schedule.h"
#include "util/error.h"

namespace spmd {

namespace {
constexpr int64_t kFloatBytes = 4;
constexpr int64_t kMaskedIdBytes = 8 + 4;  // vocab-parallel embedding: masked id (int64), mask (float)

int64_t product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<>());
}

// What one device computes a microbatch with: sizes after sharding, and what dense layers keep.
struct DeviceShapes {
  int64_t B = 0, T = 0, C = 0;
  int64_t heads = 0;                      // attention heads on this device
  int64_t head_dim = 0;
  int64_t kv_heads = 0;                   // key/value heads on this device (GPT-2: heads)
  int64_t mlp = 0;                        // MLP hidden width on this device
  int64_t vocab = 0;                      // logit columns on this device
  int64_t head_table_grad = 0;            // bytes of the table's gradient the loss keeps (the stored shard's)
  int64_t head_weight_copy = 0;           // bf16 operands: the stored table's copy, kept from step to step
  int64_t operand = kFloatBytes;          // bytes per element of the matmul operands
  int64_t seq_split = 1;                  // sequence-parallel degree: the stream holds T / seq_split positions
  int64_t context_split = 1;              // context-parallel degree: every activation holds T / context_split
  bool dropout = false;
  bool vocab_masked = false;              // the embedding's vocab dim has tensor-parallel axes
  // Bytes per element of the input each group of dense layers keeps (shared, or one per layer).
  int64_t attn_in = kFloatBytes, attn_proj_in = kFloatBytes, fc_in = kFloatBytes, mlp_proj_in = kFloatBytes;
  int64_t block_weight_copies = 0;        // bf16 operands: the copies of one block's weight shards
  int64_t sparse_weight_copies = 0;       // the same for a block with a sparse MLP
  ExpertShapes experts;                   // a sparse layer's sizes (model.moe; none: dense)
  std::vector<bool> sparse;               // per layer: its MLP is the routed experts
  ActivationTraits traits;                // the family's norms and MLP activation
  // Context parallelism by ring attention: it keeps its output and log-sum-exp, no probabilities.
  bool ring_attention = false;
  bool gpu = false;  // runtime.device: cuda (the loss's chunks are a GPU's; under auto, a CPU's)
  // Dropout masks as tensors that autograd keeps: on a GPU and under context parallelism. On a CPU
  // the fused kernels draw each mask where they apply it, again in backward (kernels::dropout).
  bool dropout_masks_kept() const { return dropout && (gpu || context_split > 1); }
  // bf16 operands without dropout on a GPU: libtorch's fused attention (SDPA) on bf16 q, k, v keeps
  // them, its output and the log-sum-exp, no (T, T) probabilities.
  bool sdpa_attention() const { return operand != kFloatBytes && !dropout && context_split == 1 && gpu; }
  // One process's sequence on a CPU: the fused kernel (kernels::causal_attention), which keeps qkv
  // in the operand dtype and the probabilities, and works through one head's rows at a time.
  bool cpu_fused_attention() const { return !gpu && context_split == 1; }
  // The heads of the qkv attention keeps: the key/value heads unrepeated in the CPU's fused kernel.
  int64_t qkv_heads() const { return cpu_fused_attention() ? heads + 2 * kv_heads : 3 * heads; }
  int64_t full_tokens() const { return B * T / context_split; }
  int64_t stream_tokens() const { return full_tokens() / seq_split; }
  int64_t stream_bytes() const { return stream_tokens() * C * kFloatBytes; }  // one (B, T', C) fp32
  bool sparse_layer(int64_t l) const { return l < static_cast<int64_t>(sparse.size()) && sparse[static_cast<size_t>(l)]; }
  bool any_sparse() const { return std::find(sparse.begin(), sparse.end(), true) != sparse.end(); }
  bool any_dense() const { return std::find(sparse.begin(), sparse.end(), false) != sparse.end(); }
  // A sparse layer's tokens: its experts' tensor-parallel group routes the gathered sequence.
  SparseTokens sparse_tokens() const { return {stream_tokens(), experts.mlp_share > 1 ? full_tokens() : stream_tokens()}; }
};

// What the family's elementwise ops keep on this device: on a CPU the fused kernels keep less than
// the ops they replace (RMSNorm no normalized copy, SwiGLU no silu(gate)).
ActivationTraits kept_traits(const ModelConfig& m, bool gpu) {
  ActivationTraits t = activation_traits(m);
  if (gpu) return t;
  t.norm_streams = 0;
  t.mlp_hidden = std::min<int64_t>(t.mlp_hidden, 2);
  return t;
}

int64_t stage_input_bytes(const DeviceShapes& d, bool first_stage) {
  int64_t bytes = d.stream_bytes();  // the embeddings' output, or the received activation
  if (!first_stage) return bytes;
  if (d.vocab_masked) bytes += d.full_tokens() * kMaskedIdBytes;
  if (d.dropout_masks_kept()) bytes += d.stream_bytes();  // the embeddings' dropout mask
  return bytes;
}

// One norm's kept statistics and stream copies.
int64_t norm_bytes(const DeviceShapes& d) {
  return d.traits.norm_stats * d.stream_tokens() * kFloatBytes + d.traits.norm_streams * d.stream_bytes();
}

// The MLP's kept bytes: the dense one's (ln_2's output as c_fc keeps it, the activation's, its
// output), or the routed experts'.
int64_t mlp_bytes(const DeviceShapes& d, bool sparse) {
  if (sparse) return sparse_mlp_kept_bytes(d.experts, d.sparse_tokens(), d.C, d.operand, d.traits.mlp_hidden);
  const int64_t N = d.full_tokens();
  return N * d.C * d.fc_in + N * d.mlp * (d.traits.mlp_hidden * d.operand + d.mlp_proj_in);
}

int64_t block_bytes(const DeviceShapes& d, Remat remat, bool sparse = false) {
  if (remat == Remat::kFull) return d.stream_bytes();  // its output, the next block's (or ln_f's) input
  const int64_t N = d.full_tokens();
  const int64_t probs = d.B * d.heads * (d.T / d.context_split) * d.T * kFloatBytes;  // (B, H', T/c, T)
  int64_t bytes = 2 * d.stream_bytes()                            // h = x + attn, and the output
                  + 2 * norm_bytes(d)                             // the two norms' statistics (and copies)
                  + N * d.C * d.attn_in                           // ln_1's output as c_attn keeps it
                  + N * d.heads * d.head_dim * d.attn_proj_in     // attention output: c_proj's input
                  + mlp_bytes(d, sparse)
                  + (sparse ? d.sparse_weight_copies : d.block_weight_copies);
  if (d.sdpa_attention() && remat != Remat::kFull) {
    // bf16 q, k, v and output, fp32 log-sum-exp per (row, head, position); nothing else to drop.
    return bytes + N * 4 * d.heads * d.head_dim * 2 + d.B * d.heads * d.T * kFloatBytes;
  }
  // qkv: attention's (or its recomputation's) input; context-parallel attention takes it in fp32.
  bytes += N * d.qkv_heads() * d.head_dim * (d.context_split > 1 ? kFloatBytes : d.operand);
  if (remat == Remat::kNone && !d.ring_attention) bytes += probs;
  // The attention mask; selective recomputation draws it in the replay. The two residual masks.
  if (d.dropout_masks_kept()) bytes += (remat == Remat::kNone ? probs : 0) + 2 * d.stream_bytes();
  if (d.ring_attention && remat == Remat::kNone) {
    // The output in head-major order, and its log-sum-exp per (row, head, position).
    bytes += N * d.heads * d.head_dim * kFloatBytes + d.B * d.heads * (d.T / d.context_split) * kFloatBytes;
  } else if (d.context_split > 1 && remat == Remat::kNone) {
    bytes += d.B * d.T * 2 * d.heads * d.head_dim * kFloatBytes;  // the gathered keys and values
    if (d.dropout) bytes += probs;                                // the dropped probabilities
  }
  return bytes;
}

int64_t head_bytes(const DeviceShapes& d) {
  return norm_bytes(d)                          // ln_f's statistics (its input is the last block's output)
         + d.full_tokens() * d.C * kFloatBytes  // the gradient of the head's input (the whole sequence's under SP)
         + d.head_table_grad + d.head_weight_copy;
}

// The loss's forward at its widest: a chunk's logits (and, with bf16 operands, their bf16 copy
// and, for an FSDP table, the gathered table's bf16 copy).
int64_t loss_working_set(const DeviceShapes& d) {
  const int64_t rows = std::min(head_chunk_rows(d.vocab, d.full_tokens(), d.gpu), d.full_tokens());
  const bool reduced = d.operand != kFloatBytes;
  const bool cast_here = reduced && d.head_weight_copy == 0;
  return rows * d.vocab * (kFloatBytes + (reduced ? d.operand : 0)) + (cast_here ? d.vocab * d.C * d.operand : 0);
}

// What the block being backwarded recomputes and holds: the internals remat none keeps (the
// widest kind of block's).
int64_t replayed_block_bytes(const DeviceShapes& d, Remat remat) {
  if (remat == Remat::kNone) return 0;
  int64_t most = 0;
  for (bool sparse : {false, true})
    if (sparse ? d.any_sparse() : d.any_dense())
      most = std::max(most, block_bytes(d, Remat::kNone, sparse) - block_bytes(d, remat, sparse));
  return most;
}

// Attention's backward at its widest: the explicit path's probabilities and their gradients
// (B, H', T/c, T) each; ring attention's one block of them, (B, H', c, c) each; none for SDPA; and
// for the CPU's fused kernel (one process's sequence) only its gradients in and out, dY and dQKV
// in the operand dtype: it works through one head's (T, T) rows at a time.
int64_t attention_working_set(const DeviceShapes& d) {
  if (d.sdpa_attention()) return 0;
  if (d.ring_attention) {
    const int64_t chunk = d.T / (2 * d.context_split);
    return 2 * 2 * d.B * d.heads * chunk * chunk * kFloatBytes;
  }
  if (d.cpu_fused_attention()) return d.full_tokens() * 4 * d.heads * d.head_dim * d.operand;
  return 2 * d.B * d.heads * (d.T / d.context_split) * d.T * kFloatBytes;
}

// The widest op's gradients in and out: attention's, the MLP's hidden layer (B, T, 4C'), or a
// sparse MLP's (its routed rows' hidden gradients and the exchanged gradient).
int64_t backward_working_set(const DeviceShapes& d) {
  const int64_t hidden = d.any_dense() ? d.full_tokens() * d.mlp * kFloatBytes : 0;
  const int64_t sparse = d.any_sparse() ? sparse_mlp_working_set(d.experts, d.sparse_tokens(), d.C) : 0;
  return std::max({2 * hidden, sparse, attention_working_set(d)});
}

// Blocks [begin, end): per_block is the widest block's.
ActivationParts activation_parts(const DeviceShapes& d, Remat remat, int64_t begin, int64_t end, bool first_stage,
                                 bool last_stage) {
  ActivationParts a;
  a.stage_input = stage_input_bytes(d, first_stage);
  for (int64_t l = begin; l < end; ++l) {
    const int64_t bytes = block_bytes(d, remat, d.sparse_layer(l));
    a.per_block = std::max(a.per_block, bytes);
    a.blocks += bytes;
  }
  a.head = last_stage ? head_bytes(d) : 0;
  return a;
}

// The stage's passes in a step: the schedule's, or without stages each microbatch's forward then
// its backward (gradient accumulation).
std::vector<PipelinePass> step_passes(const PipelineLayout& pipeline, PipelineSchedule schedule,
                                      int64_t microbatches, int64_t stage) {
  if (!pipeline.axis.empty()) return stage_passes({schedule, pipeline.stages(), pipeline.chunks, microbatches}, stage);
  std::vector<PipelinePass> passes;
  for (int64_t m = 0; m < microbatches; ++m) {
    passes.push_back({PipelinePass::kForward, m});
    passes.push_back({PipelinePass::kBackward, m});
  }
  return passes;
}

// What a step holds beside the parameters' state, by kind: per_microbatch in flight; `per_send`
// for each backward done of a chunk
// from `first_sending_chunk` on (a gradient sent back and not yet waited for); `working_set`
// during a backward.
struct StepHoldings {
  int64_t per_microbatch = 0, per_send = 0, working_set = 0;
  int64_t first_sending_chunk = 0;  // 1 on the first stage: its chunk 0 received no activation
};

// The most held at once. A backward frees its microbatch's activations as it makes gradients, so
// the worst moments are a backward's start (with its working set) and the passes' boundaries.
// (The gradients have no second copy: a data-parallel .grad is its slot of the sync's bucket.)
int64_t held_at_worst(const std::vector<PipelinePass>& passes, const StepHoldings& h) {
  int64_t live = 0, sends = 0, most = 0;
  for (const auto& p : passes) {
    if (p.kind == PipelinePass::kForward) {
      ++live;
    } else {  // its start: the sends of earlier backwards, its own working set
      most = std::max(most, live * h.per_microbatch + sends * h.per_send + h.working_set);
      --live;
      if (p.chunk >= h.first_sending_chunk) ++sends;
    }
    most = std::max(most, live * h.per_microbatch + sends * h.per_send);
  }
  return most;
}

// The bytes of a product's operand where the products run: a bf16 model.matmul_dtype stays float32
// on a CPU whose bf16 products are slower (as kernels::matmul_operand_dtype decides).
int64_t operand_bytes(MatmulDtype matmul_dtype, bool gpu) {
  const bool bf16_taken = gpu || kernels::cpu::takes_bf16_products();
  return matmul_dtype == MatmulDtype::kBFloat16 && bf16_taken ? 2 : kFloatBytes;
}

// Whether the runtime all-gathers this weight (over more than one device) before using it.
bool gathered(const ModelLayout& layout, const ParamLayout& p) {
  for (const auto& axes : p.fsdp_axes)
    if (layout.mesh.axes_size(axes) > 1) return true;
  return false;
}

// The tensor-parallel share of `logical`'s dim of a weight.
int64_t tp_share(const ModelLayout& layout, const ParamInfo& info, const std::string& logical) {
  const ParamLayout& p = layout.param(info.name);
  for (size_t d = 0; d < info.logical.size(); ++d)
    if (info.logical[d] == logical) return layout.mesh.axes_size(p.tp_axes[d]);
  return 1;
}

// bf16 operands: the copies of a sparse layer's expert, router and shared-expert weight shards
// (FSDP-gathered ones are cast from their gather instead).
int64_t sparse_weight_copies(const ModelLayout& layout, int64_t operand) {
  const std::vector<int64_t> sparse = layout.model.sparse_layers();
  if (sparse.empty() || operand == kFloatBytes) return 0;
  const std::string prefix = "h." + std::to_string(sparse.front()) + ".moe.";
  int64_t bytes = 0;
  for (const auto& p : layout.params)
    if (p.info.name.rfind(prefix, 0) == 0 && !gathered(layout, p)) bytes += p.sharding.shard_numel() * operand;
  return bytes;
}

DeviceShapes device_shapes(const ModelLayout& layout, int64_t rows) {
  const ModelConfig& m = layout.model;
  const std::vector<ParamInfo> table = param_table(m, layout.padded_vocab);
  // The dense blocks' weights (a model whose first layers are sparse: the first dense layer's).
  const int64_t dense = first_dense_layer(m);
  const std::vector<ParamInfo> entries = layer_entries(table, std::max<int64_t>(dense, 0));
  const BlockWeights w = block_weights(entries);
  DeviceShapes d;
  d.experts = expert_shapes(layout);
  for (int64_t l = 0; l < m.n_layer; ++l) d.sparse.push_back(m.moe.sparse_layer(l));
  d.B = rows, d.T = m.block_size, d.C = m.n_embd;
  d.heads = m.n_head / tp_share(layout, *w.attention_in.front(), "heads");
  d.head_dim = m.head_dim();
  d.kv_heads = m.kv_heads() * d.heads / m.n_head;  // split by the same axes as the query heads
  d.mlp = dense < 0 ? 0 : m.mlp_size() / tp_share(layout, *w.mlp_in.front(), "mlp");
  d.traits = kept_traits(m, layout.on_gpu);
  const ParamLayout& head = layout.param(head_table(m));
  d.vocab = head.gathered_shape()[0];
  d.head_table_grad = head.sharding.shard_numel() * kFloatBytes;
  const int64_t operand = operand_bytes(m.matmul_dtype, layout.on_gpu);
  if (!gathered(layout, head) && operand != kFloatBytes) d.head_weight_copy = head.sharding.shard_numel() * operand;
  d.vocab_masked = !layout.param("wte").tp_axes[0].empty();
  d.seq_split = layout.mesh.axes_size(layout.seq_axes);
  d.context_split = layout.cp_size();
  d.dropout = m.dropout > 0;
  d.gpu = layout.on_gpu;
  d.ring_attention = d.context_split > 1 && layout.context_exchange == ContextExchange::kRing;
  // A dense layer keeps its input in the operand dtype (the layers that read one norm output share
  // it), and a bf16 copy of its weight shard, except an FSDP layer, which gathers (and casts) the
  // weight again in backward. A column-parallel layer takes its input through fp32 collectives:
  // with bf16 operands it casts (and keeps) its own copy, and under sequence parallelism each keeps
  // its own gathered sequence.
  d.operand = operand;
  auto keep = [&](const std::vector<const ParamInfo*>& group, int64_t& in_bytes, int64_t& copies) {
    int64_t shared = 0, own = 0;
    for (const ParamInfo* info : group) {
      const ParamLayout& p = layout.param(info->name);
      const bool column_parallel = !p.output_tp_axes().empty();
      const bool own_input = column_parallel && (d.seq_split > 1 || operand != kFloatBytes);
      if (own_input) own += operand;
      else shared = operand;
      if (!gathered(layout, p) && operand != kFloatBytes) copies += p.sharding.shard_numel() * operand;
    }
    in_bytes = shared + own;
  };
  keep(w.attention_in, d.attn_in, d.block_weight_copies);
  keep(w.attention_out, d.attn_proj_in, d.block_weight_copies);
  d.sparse_weight_copies = d.block_weight_copies + sparse_weight_copies(layout, operand);
  if (dense < 0) return d;
  keep(w.mlp_in, d.fc_in, d.block_weight_copies);
  keep(w.mlp_out, d.mlp_proj_in, d.block_weight_copies);
  return d;
}
}  // namespace

int64_t microbatches_in_flight(const PipelineLayout& pipeline, PipelineSchedule schedule, int64_t microbatches,
                               int64_t stage) {
  if (pipeline.axis.empty()) return 1;
  return max_in_flight(stage_passes({schedule, pipeline.stages(), pipeline.chunks, microbatches}, stage));
}

MemoryEstimate estimate_memory(const ModelLayout& layout, int64_t global_batch, int64_t microbatches, int64_t rank,
                               PipelineSchedule schedule, Remat remat, Optimizer optimizer) {
  MemoryEstimate e;
  std::map<int64_t, int64_t> unit_bytes;  // FSDP units (a block, or the weights outside the stack), gathered
  for (const auto& p : layout.params) {
    if (!p.sharding.holds(rank)) continue;  // another pipeline stage's
    e.params += p.sharding.shard_numel() * kFloatBytes;
    if (optimizer == Optimizer::kMuon && takes_muon(p.info)) e.muon_momentum += p.sharding.shard_numel() * kFloatBytes;
    if (gathered(layout, p)) unit_bytes[p.info.layer] += product(p.gathered_shape()) * kFloatBytes;
  }
  // FSDP gathers a unit at a time (parallel/fsdp_prefetch.h): at worst the unit in use, its full
  // gradients before their reduce-scatter, the next unit's gather in flight (runtime.fsdp_prefetch)
  // and a flat buffer beside one of them while it is split or joined.
  for (const auto& [layer, bytes] : unit_bytes) e.fsdp_gathered = std::max(e.fsdp_gathered, 4 * bytes);
  e.grads = e.params;
  e.optimizer = 2 * (e.params - e.muon_momentum) + e.muon_momentum;  // AdamW's m and v; Muon's one buffer
  const PipelineLayout& pipeline = layout.pipeline;
  const int64_t stage = layout.stage_of(rank);
  // What one (microbatch, chunk) in flight keeps: the stage's largest chunk of blocks.
  const int64_t local_batch = global_batch / layout.dp_size() / microbatches;
  const DeviceShapes shapes = device_shapes(layout, local_batch);
  for (int64_t k = 0; k < pipeline.chunks; ++k) {
    const ActivationParts chunk = activation_parts(shapes, remat, pipeline.chunk_begin(stage, k),
                                                   pipeline.chunk_end(stage, k), stage == 0,
                                                   stage == pipeline.stages() - 1);
    if (k == 0 || chunk.blocks > e.activation_parts.blocks) e.activation_parts = chunk;
  }
  e.activations_per_microbatch = e.activation_parts.total();
  e.microbatches_in_flight = microbatches_in_flight(pipeline, schedule, microbatches, stage);
  e.activations = e.activations_per_microbatch * e.microbatches_in_flight;
  // Each term is what it adds at the step's worst moment to those before it.
  const auto passes = step_passes(pipeline, schedule, microbatches, stage);
  StepHoldings held{e.activations_per_microbatch};
  int64_t worst = e.activations;
  auto added = [&] {
    const int64_t before = worst;
    worst = held_at_worst(passes, held);
    return worst - before;
  };
  held.per_send = pipeline.axis.empty() ? 0 : shapes.stream_bytes();
  held.first_sending_chunk = stage == 0 ? 1 : 0;
  e.gradient_sends = added();
  held.working_set = backward_working_set(shapes);
  if (stage == pipeline.stages() - 1) held.working_set = std::max(held.working_set, loss_working_set(shapes));
  e.backward_working_set = added();
  held.working_set += replayed_block_bytes(shapes, remat);
  e.recompute = added();
  e.remat = remat;
  e.sequence_parallel_axes = layout.seq_axes;
  e.sequence_parallel_degree = layout.mesh.axes_size(layout.seq_axes);
  e.context_parallel_axes = layout.context_axes;
  e.context_parallel_degree = layout.cp_size();
  e.context_exchange = layout.context_exchange;
  return e;
}

int64_t stage_activation_bytes(const ModelLayout& layout, int64_t global_batch, int64_t microbatches, int64_t rank,
                               Remat remat) {
  const PipelineLayout& pipeline = layout.pipeline;
  const int64_t stage = layout.stage_of(rank), last = pipeline.stages() - 1;
  const DeviceShapes d = device_shapes(layout, global_batch / layout.dp_size() / microbatches);
  int64_t bytes = 0;
  // Chunk k of the stage is virtual stage k * stages() + stage: the embeddings come before the
  // first stage's chunk 0, the head after the last stage's last chunk.
  for (int64_t k = 0; k < pipeline.chunks; ++k)
    bytes += activation_parts(d, remat, pipeline.chunk_begin(stage, k), pipeline.chunk_end(stage, k),
                              stage == 0 && k == 0, stage == last && k == pipeline.chunks - 1)
                 .total();
  return bytes;
}

int64_t first_rank_of_stage(const ModelLayout& layout, int64_t stage) {
  std::vector<int64_t> coords(static_cast<size_t>(layout.mesh.ndim()), 0);
  if (!layout.pipeline.axis.empty()) coords[static_cast<size_t>(layout.mesh.axis_index(layout.pipeline.axis))] = stage;
  return layout.mesh.rank_at(coords);
}

std::vector<MemoryEstimate> estimate_stages(const ModelLayout& layout, const Config& config) {
  std::vector<MemoryEstimate> out;
  for (int64_t s = 0; s < layout.pipeline.stages(); ++s)
    out.push_back(estimate_memory(layout, config.data.batch_size, config.train.microbatches,
                                  first_rank_of_stage(layout, s), config.runtime.pipeline_schedule,
                                  config.runtime.remat, config.train.optimizer));
  return out;
}

int64_t fullest_stage(const std::vector<MemoryEstimate>& stages) {
  auto it = std::max_element(stages.begin(), stages.end(),
                             [](const MemoryEstimate& a, const MemoryEstimate& b) { return a.total() < b.total(); });
  return static_cast<int64_t>(it - stages.begin());
}

MemoryEstimate estimate_unsharded_memory(const ModelConfig& model, int64_t global_batch, int64_t microbatches,
                                         Remat remat, bool on_gpu, Optimizer optimizer) {
  MemoryEstimate e;
  for (const auto& p : param_table(model, model.vocab_size)) {
    e.params += product(p.shape) * kFloatBytes;
    if (optimizer == Optimizer::kMuon && takes_muon(p)) e.muon_momentum += product(p.shape) * kFloatBytes;
  }
  e.grads = e.params;
  e.optimizer = 2 * (e.params - e.muon_momentum) + e.muon_momentum;
  DeviceShapes d;
  d.B = global_batch / microbatches, d.T = model.block_size, d.C = model.n_embd;
  d.heads = model.n_head, d.head_dim = model.head_dim(), d.mlp = model.mlp_size(), d.kv_heads = model.kv_heads();
  d.vocab = model.vocab_size;
  d.head_table_grad = d.vocab * d.C * kFloatBytes;
  d.dropout = model.dropout > 0;
  d.traits = kept_traits(model, on_gpu);
  const int64_t operand = operand_bytes(model.matmul_dtype, on_gpu);
  d.operand = operand;
  // One kept input per group of layers (in the operand dtype), and a copy of each weight.
  const std::vector<ParamInfo> table = param_table(model, model.vocab_size);
  const int64_t dense = first_dense_layer(model);
  const std::vector<ParamInfo> entries = layer_entries(table, std::max<int64_t>(dense, 0));
  const BlockWeights w = block_weights(entries);
  if (dense < 0) d.mlp = 0;
  d.experts = unsharded_expert_shapes(model);
  for (int64_t l = 0; l < model.n_layer; ++l) d.sparse.push_back(model.moe.sparse_layer(l));
  d.attn_in = d.attn_proj_in = d.fc_in = d.mlp_proj_in = operand;
  if (operand != kFloatBytes) d.head_weight_copy = d.vocab * d.C * operand;
  d.gpu = on_gpu;
  if (operand != kFloatBytes) {
    for (const ParamInfo* info : w.all()) d.block_weight_copies += product(info->shape) * operand;
    for (const ParamInfo* info : w.attention_in) d.sparse_weight_copies += product(info->shape) * operand;
    for (const ParamInfo* info : w.attention_out) d.sparse_weight_copies += product(info->shape) * operand;
    const std::vector<int64_t> sparse = model.sparse_layers();
    const std::string prefix = sparse.empty() ? "" : "h." + std::to_string(sparse.front()) + ".moe.";
    for (const ParamInfo& p : table)
      if (!prefix.empty() && p.name.rfind(prefix, 0) == 0) d.sparse_weight_copies += product(p.shape) * operand;
  }
  e.activation_parts = activation_parts(d, remat, 0, model.n_layer, true, true);
  e.backward_working_set = std::max(backward_working_set(d), loss_working_set(d));
  e.recompute = replayed_block_bytes(d, remat);
  e.activations_per_microbatch = e.activation_parts.total();
  e.activations = e.activations_per_microbatch;
  e.remat = remat;
  return e;
}

}  // namespace spmd
