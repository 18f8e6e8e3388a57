// How each logical operation becomes local compute + collectives.
#include "parallel/parallel_ops.h"

#include <algorithm>

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/collectives.h"
#include "kernels/kernels.h"
#include "parallel/counter_rng.h"
#include "parallel/fsdp_ops.h"
#include "parallel/head_loss.h"
#include "parallel/ring_attention.h"
#include "util/error.h"

namespace spmd {

at::Tensor ParallelOps::recomputed(const at::Tensor& x, RecomputedBody body) {
  bodies_.push_back(std::make_unique<RecomputedBody>(std::move(body)));
  return recompute_in_backward(*bodies_.back(), x);
}

at::Tensor ParallelOps::block(const at::Tensor& x, std::function<at::Tensor(const at::Tensor&)> body) {
  if (remat_ != Remat::kFull) return body(x);
  return recomputed(x, std::move(body));
}

const ParamLayout& ParallelOps::layout_of(const std::string& name) const {
  return model_.layout().params[model_.index_of(name)];
}

bool ParallelOps::has_param(const std::string& name) const {
  for (const auto& p : model_.layout().params)
    if (p.info.name == name) return true;
  return false;
}

at::Tensor ParallelOps::shard(const std::string& name) const { return model_.params()[model_.index_of(name)]; }

FsdpWeight ParallelOps::fsdp_weight(const std::string& name) {
  const size_t k = model_.index_of(name);
  FsdpWeight w{k, prefetcher(), at::Tensor()};
  if (!at::GradMode::is_enabled()) return w;
  const int64_t unit = prefetcher()->unit_of(k);
  auto it = unit_handles_.find(unit);
  if (it == unit_handles_.end()) it = unit_handles_.emplace(unit, fsdp_unit_grad_handles(*prefetcher(), unit)).first;
  const auto& ps = prefetcher()->unit_params(unit);
  w.grad_handle = it->second[static_cast<size_t>(std::find(ps.begin(), ps.end(), k) - ps.begin())];
  return w;
}

at::Tensor ParallelOps::param(const std::string& name) {
  // FSDP: the weight gathered with its unit; the gradient is reduce-scattered back with the unit's.
  return is_fsdp(name) ? fsdp_param(fsdp_weight(name)) : shard(name);
}

at::Tensor ParallelOps::matmul_param(const std::string& name) {
  const at::ScalarType dtype = matmul_dtype();
  // A gathered (FSDP) weight is cast where it is gathered, inside fsdp_linear.
  if (dtype == at::kFloat || is_fsdp(name)) return param(name);
  return model_.param_as(model_.index_of(name), dtype);
}

at::Tensor ParallelOps::column_input(const at::Tensor& x, const std::vector<std::string>& out_tp) {
  if (out_tp.empty()) return x;
  // Tensor-parallel collectives carry float32 (a bf16 input's gradient is all-reduced over the
  // group: summed in float32, as one process sums it).
  const at::Tensor input = x.to(at::kFloat);
  // Column-parallel: the replicated input fans out to shards of the output features.
  // Under sequence parallelism the input is this rank's slice of the sequence: gather it.
  return sequence_parallel() ? gather_sequence_from_group(input, group(out_tp)) : copy_to_group(input, group(out_tp));
}

at::Tensor ParallelOps::dense(const at::Tensor& x, const std::string& weight, const std::string& bias,
                              int64_t contracted_dims) {
  const auto& layout = layout_of(weight);
  SPMD_ASSERT(layout.info.input_dims == contracted_dims, "{}: dense over {} dims, table says {}", weight,
              contracted_dims, layout.info.input_dims);
  const size_t n = static_cast<size_t>(contracted_dims);
  auto in_tp = layout.input_tp_axes();
  const std::vector<int64_t> w_shape = layout.gathered_shape();  // as computed with (FSDP dims gathered)
  const at::ScalarType operands = matmul_dtype();
  const at::Tensor input = column_input(x, layout.output_tp_axes());
  // One 2-D matmul: (rows, K) x (K, N); a bias that needs no reduction first rides in addmm.
  const int64_t lead = input.dim() - static_cast<int64_t>(n);
  std::vector<int64_t> out_shape(input.sizes().begin(), input.sizes().begin() + lead);
  out_shape.insert(out_shape.end(), w_shape.begin() + static_cast<int64_t>(n), w_shape.end());
  int64_t k = 1;
  for (size_t d = 0; d < n; ++d) k *= w_shape[d];
  at::Tensor x2 = input.reshape({-1, k});  // (rows, K)
  const bool fold_bias = !bias.empty() && in_tp.empty();
  at::Tensor b = fold_bias ? matmul_param(bias).reshape({-1}) : at::Tensor();
  at::Tensor y;
  if (is_fsdp(weight)) {
    y = fsdp_linear(x2, fsdp_weight(weight), /*transposed=*/false, b, operands);
  } else {
    y = kernels::dense_product(x2, matmul_param(weight).reshape({k, -1}), b, operands);  // (K, N) weight
  }
  y = y.view(out_shape);  // bf16 matmuls: bf16, for the next matmul (or the float32 residual add)
  // Row-parallel: each shard of the input features gives a partial sum.
  // Under sequence parallelism each rank keeps the sum for its slice of the sequence only.
  if (!in_tp.empty()) y = y.to(at::kFloat);  // each partial sum rounded once, summed in float32
  if (!in_tp.empty())
    y = sequence_parallel() ? reduce_scatter_sequence_to_group(y, group(in_tp)) : reduce_from_group(y, group(in_tp));
  if (!bias.empty() && !fold_bias) y = y + param(bias);
  return y;
}

at::Tensor ParallelOps::embed(const std::string& table, const at::Tensor& ids) {
  const auto& layout = layout_of(table);
  auto lookup = [&](const at::Tensor& local_ids) {  // (V_local, C) table rows
    return is_fsdp(table) ? fsdp_embedding(local_ids, fsdp_weight(table)) : at::embedding(param(table), local_ids);
  };
  const auto& vocab_tp = layout.tp_axes[0];
  sequence_length_ = ids.size(1);
  if (vocab_tp.empty()) return lookup(ids);
  // Vocab-parallel: look up the ids this shard owns, zeros elsewhere, then sum over the group.
  const int64_t rows = layout.gathered_shape()[0];
  const int64_t offset = model_.layout().mesh.index_along(model_.comm().rank(), vocab_tp) * rows;
  at::Tensor local = ids - offset;
  at::Tensor outside = (local < 0) | (local >= rows);
  at::Tensor out = lookup(local.masked_fill(outside, 0));
  out = out * (~outside).unsqueeze(-1).to(out.scalar_type());
  return reduce_from_group(out, group(vocab_tp));
}

at::Tensor ParallelOps::local_logits(const at::Tensor& x2, const std::string& table) {
  if (is_fsdp(table))
    return fsdp_linear(x2, fsdp_weight(table), /*transposed=*/true, at::Tensor(), matmul_dtype()).to(at::kFloat);
  // The (V_local, C) table as W^T; the logits in float32 for the loss and sampling.
  return kernels::dense_product(x2, matmul_param(table).t(), at::Tensor(), matmul_dtype()).to(at::kFloat);
}

at::Tensor ParallelOps::tied_head_logits(const at::Tensor& x, const std::string& table) {
  const Group& vocab_group = group(layout_of(table).tp_axes[0]);
  const at::Tensor x32 = vocab_group.size() > 1 ? x.to(at::kFloat) : x;  // collectives carry float32
  at::Tensor logits = local_logits(copy_to_group(x32, vocab_group), table);  // (B, V_local)
  if (vocab_group.size() > 1) logits = vocab_group.all_gather(logits, 1);  // the shards in the axis' order
  return logits.narrow(1, 0, model_.layout().model.vocab_size);             // padding rows dropped
}

at::Tensor ParallelOps::attention_over_prefix(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return kernels::attention_over_prefix(q, k, v);  // heads are whole on each rank: no communication
}

ParallelOps::HeadInput ParallelOps::head_input(const at::Tensor& x, const std::string& table,
                                               const at::Tensor& targets) {
  const auto& layout = layout_of(table);
  const auto& vocab_tp = layout.tp_axes[0];
  const Group& vocab_group = group(vocab_tp);
  const at::Tensor x32 = vocab_group.size() > 1 ? x.to(at::kFloat) : x;  // collectives carry float32
  const at::Tensor full =
      sequence_parallel() ? gather_sequence_from_group(x32, vocab_group) : copy_to_group(x32, vocab_group);
  HeadShard head;
  const int64_t columns = layout.gathered_shape()[0];  // this rank's vocabulary ids (FSDP dims gathered)
  head.vocab_offset = model_.layout().mesh.index_along(model_.comm().rank(), vocab_tp) * columns;
  head.valid_vocab = model_.layout().model.vocab_size;
  head.vocab_group = &vocab_group;
  if (is_fsdp(table)) {
    head.fsdp_index = model_.index_of(table);
    head.gathers = model_.fsdp_gathers(head.fsdp_index);
    head.prefetcher = prefetcher();
  }
  head.operand_dtype = matmul_dtype();
  // bf16: the stored table's copy made once per optimizer update, outside autograd (the head
  // makes the table's float32 gradient itself); an FSDP table is cast where it is gathered.
  if (head.gathers.empty() && head.operand_dtype != at::kFloat) {
    at::NoGradGuard no_grad;
    head.operand_table = matmul_param(table);
  }
  // Under context parallelism x holds this rank's chunks of the sequence: so must the targets.
  const at::Tensor local_targets = context_parallel() ? take_context_chunks(targets, 1, context_split()) : targets;
  return {full.reshape({-1, x.size(-1)}), local_targets.reshape({-1}), std::move(head)};
}

at::Tensor ParallelOps::tied_head_loss(const at::Tensor& x, const std::string& table, const at::Tensor& targets) {
  const HeadInput in = head_input(x, table, targets);
  return head_cross_entropy(in.x, shard(table), in.targets, in.head);
}

at::Tensor ParallelOps::tied_head_row_losses(const at::Tensor& x, const std::string& table, const at::Tensor& targets) {
  const HeadInput in = head_input(x, table, targets);
  const at::Tensor tokens = head_token_losses(in.x, shard(table), in.targets, in.head);
  at::Tensor rows = tokens.reshape({targets.size(0), -1}).sum(1);  // (B,): this rank's positions
  if (context_parallel()) group(model_.layout().context_axes).all_reduce_sum(rows);
  return rows;
}

at::Tensor ParallelOps::layer_norm(const at::Tensor& x, const std::string& weight, const std::string& bias, double eps) {
  at::Tensor b = bias.empty() ? at::Tensor() : param(bias);
  // Statistics and affine map in float32; the output feeds a matmul: in its operand dtype.
  if (is_fsdp(weight)) return fsdp_layer_norm(x, fsdp_weight(weight), b, eps).to(matmul_dtype());
  return at::layer_norm(x, {x.size(-1)}, param(weight), b, eps).to(matmul_dtype());
}

bool ParallelOps::fuses_residual_norm(const at::Tensor& x, const std::string& weight, const std::string& bias) const {
  return kernels::takes_generic_path(x.device()) && x.scalar_type() == at::kFloat && !is_fsdp(weight) &&
         (bias.empty() || !is_fsdp(bias));
}

ModelOps::AddNormed ParallelOps::add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const std::string& weight,
                                                const std::string& bias, double eps) {
  if (!fuses_residual_norm(x, weight, bias)) return ModelOps::add_layer_norm(x, delta, weight, bias, eps);
  const auto r = kernels::residual_norm(x, delta, param(weight), bias.empty() ? at::Tensor() : param(bias), eps,
                                        /*rms=*/false, matmul_dtype());
  return {r.sum, r.normed};
}

ModelOps::AddNormed ParallelOps::add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const std::string& weight,
                                              double eps) {
  // The CPU's fused kernel: one pass each way (kernels/cpu/fused_rms_norm.h), FSDP's gathered scale too.
  if (!kernels::takes_generic_path(x.device()) && x.scalar_type() == at::kFloat) {
    const auto r = kernels::residual_norm(x, delta, param(weight), at::Tensor(), eps, /*rms=*/true, matmul_dtype());
    return {r.sum, r.normed};
  }
  if (!fuses_residual_norm(x, weight, "")) return ModelOps::add_rms_norm(x, delta, weight, eps);
  const auto r = kernels::residual_norm(x, delta, param(weight), at::Tensor(), eps, /*rms=*/true, matmul_dtype());
  return {r.sum, r.normed};
}

at::Tensor ParallelOps::rms_norm(const at::Tensor& x, const std::string& weight, double eps) {
  // Statistics in float32 (FSDP: param() gathers the scale); the output feeds a matmul: in its
  // operand dtype.
  return kernels::rms_norm(x, param(weight), eps).to(matmul_dtype());
}

at::Tensor ParallelOps::positions(int64_t length, int64_t first_position, const at::Tensor& document_starts) {
  const at::Device device = model_.comm().device();
  // Under context parallelism this rank's attention holds its two head-tail chunks; elsewhere
  // (sequence parallelism included: attention sees the gathered sequence) the whole sequence.
  at::Tensor positions = context_parallel() ? context_positions(length, context_split(), device)
                                            : at::arange(length, at::TensorOptions().dtype(at::kLong).device(device));
  positions = (positions + first_position).unsqueeze(0);  // (1, length)
  if (!document_starts.defined()) return positions;
  const at::Tensor starts = context_parallel() ? take_context_chunks(document_starts, 1, context_split()) : document_starts;
  return positions - starts;  // (B, length)
}

at::Tensor ParallelOps::causal_attention(const at::Tensor& qkv, const std::string& dropout_site,
                                         const at::Tensor& document_starts) {
  // The dropout mask is this rank's block of the multipliers dropout() would apply: a pure
  // function of global indices, whichever kernel (and device) applies them.
  // (B, H, T, T): both sequence dims are whole here, also under sequence parallelism (where a
  // `seq` rule would claim the heads' axis first).
  static const std::vector<std::string> kProbs{"batch", "heads", "", ""};
  if (context_parallel()) {
    // Selective recomputation replays the gather too: backward keeps only the local qkv.
    if (remat_ == Remat::kSelective)
      return recomputed(qkv, [this, dropout_site, document_starts](const at::Tensor& in) {
        return context_attention(in, dropout_site, document_starts);
      });
    return context_attention(qkv, dropout_site, document_starts);
  }
  // As its draws: the CPU's fused kernel draws them itself and keeps no mask for backward.
  kernels::DropoutDraws dropout;
  if (!dropout_site.empty() && model_.layout().model.dropout > 0) {
    const int64_t B = qkv.size(0), T = qkv.size(1), H = qkv.size(3);
    dropout = dropout_draws(dropout_block({B, H, T, T}, dropout_site, kProbs));
  }
  // Selective recomputation (Megatron's): the attention core, whose probabilities are (T, T) per head.
  const at::ScalarType operands = matmul_dtype();  // bf16 matmuls: bf16 attention too
  if (remat_ == Remat::kSelective)
    return recomputed(qkv, [dropout, operands, document_starts](const at::Tensor& in) {
      return kernels::causal_attention(in, dropout, operands, document_starts);
    });
  return kernels::causal_attention(qkv, dropout, operands, document_starts);
}

at::Tensor ParallelOps::rotary_attention(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos,
                                         const at::Tensor& sin, const std::string& dropout_site,
                                         const at::Tensor& document_starts) {
  // The CPU's fused kernels: the query and key heads rotated in the packed layout attention reads,
  // each key/value head read for its query heads (never repeated). Context parallelism exchanges
  // whole (B, T, 3, H, D) blocks, and a GPU takes libtorch's attention: the default.
  if (context_parallel() || kernels::takes_generic_path(qkv.device()))
    return ModelOps::rotary_attention(qkv, kv_heads, cos, sin, dropout_site, document_starts);
  static const std::vector<std::string> kGroupedProbs{"batch", "heads", "", ""};  // as causal_attention's
  const at::Tensor packed = kernels::rotary_pack(qkv, kv_heads, cos, sin);        // (B, T, H + 2 Hkv, D)
  kernels::DropoutDraws dropout;
  if (!dropout_site.empty() && model_.layout().model.dropout > 0) {
    const int64_t B = qkv.size(0), T = qkv.size(1), H = qkv.size(2) - 2 * kv_heads;
    dropout = dropout_draws(dropout_block({B, H, T, T}, dropout_site, kGroupedProbs));
  }
  const at::ScalarType operands = matmul_dtype();
  if (remat_ == Remat::kSelective)
    return recomputed(packed, [kv_heads, dropout, operands, document_starts](const at::Tensor& in) {
      return kernels::grouped_causal_attention(in, kv_heads, dropout, operands, document_starts);
    });
  return kernels::grouped_causal_attention(packed, kv_heads, dropout, operands, document_starts);
}

ContextSplit ParallelOps::context_split() const {
  const auto& layout = model_.layout();
  return {layout.cp_size(), layout.cp_index(model_.comm().rank())};
}

at::Tensor ParallelOps::context_attention(const at::Tensor& qkv_in, const std::string& dropout_site,
                                          const at::Tensor& document_starts) {
  const at::Tensor qkv = qkv_in.to(at::kFloat);  // context-parallel attention runs in float32
  // The probabilities' rows are this rank's query positions (head-tail), their columns every key
  // position in order: the rows of the one-process (B, H, T, T) mask at those positions.
  static const std::vector<std::string> kProbs{"batch", "heads", "seq", ""};
  const ContextSplit split = context_split();
  const Group& context = group(model_.layout().context_axes);
  const int64_t B = qkv.size(0), T_local = qkv.size(1), H = qkv.size(3), T = T_local * split.size;
  at::Tensor mask;
  if (!dropout_site.empty() && model_.layout().model.dropout > 0)
    mask = dropout_multipliers(dropout_block({B, H, T_local, T}, dropout_site, kProbs), qkv.device());
  // The document starts of this rank's queries, in its head-tail order (global positions).
  const at::Tensor q_starts =
      document_starts.defined() ? take_context_chunks(document_starts, 1, split) : at::Tensor();  // (B, T_local)
  if (model_.layout().context_exchange == ContextExchange::kRing) {
    model_.count_ring_attention_forward();
    return ring_attention(qkv.select(2, 0), qkv.select(2, 1), qkv.select(2, 2), mask, context, split, q_starts);
  }
  const at::Tensor kv = gather_context_sequence(qkv.narrow(2, 1, 2), context, split);
  const at::Tensor positions = context_positions(T_local, split, qkv.device());
  return kernels::attention_at_positions(qkv.select(2, 0), kv.select(2, 0), kv.select(2, 1), positions, mask,
                                         q_starts);
}

at::Tensor ParallelOps::bias_gelu(const at::Tensor& h, const std::string& bias) {
  // Not recomputed under selective remat: the fused kernel keeps one tensor (its derivative) the
  // size of its input, which recomputation would have to keep instead.
  return kernels::bias_gelu(h, bias.empty() ? at::Tensor() : matmul_param(bias));
}

at::Tensor ParallelOps::rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  // The GPU's path rotates in one op each way (kernels::rotary); the CPU keeps rope.h's ops.
  if (!kernels::takes_generic_path(x.device())) return ModelOps::rotary(x, cos, sin);
  return kernels::rotary(x, cos, sin);
}

at::Tensor ParallelOps::dense_gelu(const at::Tensor& x, const std::string& weight, const std::string& bias) {
  // The CPU's fused bias + GELU pass costs what GELU alone does; on the device-generic path (the
  // GPU's) bias + GELU are two passes over (N, 4C), so the bias rides in the product's addmm there.
  if (bias.empty() || !kernels::takes_generic_path(x.device())) return ModelOps::dense_gelu(x, weight, bias);
  return kernels::bias_gelu(dense(x, weight, bias, 1));
}

at::Tensor ParallelOps::swiglu(const at::Tensor& gate_up) { return kernels::swiglu_halves(gate_up); }

at::Tensor ParallelOps::dropout(const at::Tensor& x, const std::string& site, const std::vector<std::string>& logical) {
  if (model_.layout().model.dropout <= 0) return x;
  const DropoutBlock block = dropout_block(x.sizes(), site, logical);
  // Under context parallelism the rank's rows are two chunks: their multipliers, materialized.
  if (block.seq_dim >= 0) return x * dropout_multipliers(block, x.device());
  return kernels::dropout(x, dropout_draws(block));
}

ParallelOps::DropoutBlock ParallelOps::dropout_block(at::IntArrayRef shape, const std::string& site,
                                                     const std::vector<std::string>& logical) {
  const auto& layout = model_.layout();
  PartitionSpec spec = layout.rules.resolve(logical, site);
  DropoutBlock b{shape.vec(), std::vector<int64_t>(shape.size()), std::vector<int64_t>(shape.size())};
  for (size_t d = 0; d < b.local.size(); ++d) {
    const auto& axes = spec.axes_of(d);
    // The rank's block of this dim; along the batch, its rows are microbatch_.count slices of
    // which x holds one.
    const bool batch = d < logical.size() && logical[d] == "batch";
    const int64_t block = batch ? b.local[d] * microbatch_.count : b.local[d];
    b.global[d] = block * layout.mesh.axes_size(axes);
    b.offset[d] = layout.mesh.index_along(model_.comm().rank(), axes) * block;
    if (batch) b.offset[d] += microbatch_.index * b.local[d];
    if (context_parallel() && !axes.empty() && axes == layout.context_axes) b.seq_dim = static_cast<int64_t>(d);
  }
  b.stream = stream_id(fmt::format("{}@step{}", site, step_));
  return b;
}

kernels::DropoutDraws ParallelOps::dropout_draws(const DropoutBlock& b) {
  SPMD_ASSERT(b.seq_dim < 0, "dropout draws for a block {} along the context-parallel chunks", b.local);
  return spmd::dropout_draws(b.local, b.global, b.offset, seed_, b.stream, model_.layout().model.dropout);
}

at::Tensor ParallelOps::dropout_multipliers(const DropoutBlock& b, c10::Device device) {
  const double p = model_.layout().model.dropout;
  // Drawn where x lives: the hand-vectorized loop on the CPU, one kernel on a GPU (no host work,
  // no copy); both give the same bits.
  auto draw = [&](const std::vector<int64_t>& block_local, const std::vector<int64_t>& block_offset) {
    return dropout_mask_block_on(device, block_local, b.global, block_offset, seed_, b.stream, p);
  };
  if (b.seq_dim < 0) return draw(b.local, b.offset);
  // Two blocks along the sequence: the rank's chunks at their global positions.
  const size_t sd = static_cast<size_t>(b.seq_dim);
  std::vector<at::Tensor> chunks;
  for (int64_t start : context_split().chunk_starts(b.global[sd])) {
    std::vector<int64_t> chunk_local = b.local, chunk_offset = b.offset;
    chunk_local[sd] = b.local[sd] / 2;
    chunk_offset[sd] = start;
    chunks.push_back(draw(chunk_local, chunk_offset));
  }
  return at::cat(chunks, b.seq_dim);
}

at::Tensor ParallelOps::constrain(const at::Tensor& x, const std::vector<std::string>& logical) {
  // The layouts the runtime executes keep the residual stream sharded on the batch axes, on the
  // sequence-parallel axes along `seq`, and replicated elsewhere: check. The one transition is
  // the embeddings' full sequence entering a sequence-split stream.
  const auto& layout = model_.layout();
  PartitionSpec spec = layout.rules.resolve(logical, "activations");
  for (size_t d = 0; d < logical.size(); ++d) {
    const auto& axes = spec.axes_of(d);
    bool allowed = (d == 0 && axes == layout.batch_axes) ||
                   (d == 1 && (axes == layout.seq_axes || axes == layout.context_axes));
    if (!allowed && !axes.empty())
      throw UsageError(fmt::format("activation constraint {}: dim {} ('{}') maps to mesh axes {}; only the batch and "
                                   "(sequence parallelism) seq dims of block-boundary activations may be sharded (map "
                                   "'{}' to null)",
                                   spec.to_string(), d, logical[d], axes, logical[d]));
  }
  if (sequence_parallel() && x.size(1) == sequence_length_) return scatter_to_group(x, 1, group(layout.seq_axes));
  // Context parallelism: the embeddings' whole sequence becomes this rank's head-tail chunks.
  if (context_parallel() && x.size(1) == sequence_length_) return take_context_chunks(x, 1, context_split());
  return x;
}

}  // namespace spmd
