// The chunked head behind head_loss.h: one pass over the rows, chunk by chunk, that makes the
// losses and, for training, the gradients; the autograd node hands those gradients out in backward.
#include "parallel/head_loss.h"

#include <ATen/core/grad_mode.h>
#include <algorithm>
#include <cmath>

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/kernels.h"
#include "util/error.h"

namespace spmd {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What one pass over the rows makes.
struct HeadPass {
  at::Tensor losses;      // (N,): each row's cross-entropy, 0 where the target is negative
  at::Tensor dx, dtable;  // where asked for: the gradients of mean(losses) (dtable: of the stored table or shard)
};

// The table the products use: the stored one, or the FSDP shard's all-gather.
at::Tensor gathered_table(const at::Tensor& table, const HeadShard& head) {
  if (head.gathers.empty()) return table;
  return head.prefetcher ? head.prefetcher->gather(head.fsdp_index, FsdpPrefetcher::Pass::kForward)
                         : fsdp_gather(table, head.gathers);
}

// The rows' losses from their logits z (n, V_local) (padding columns -inf); z becomes the
// softmax where `softmax` (else exp(z - row max)). A row's max, sum-exp and target logit are
// reduced across the vocab group. `column`: each target's local column (0 where the target is
// not here); `here`: whether it is.
at::Tensor row_losses(at::Tensor& z, const at::Tensor& column, const at::Tensor& here, const Group& group,
                      bool softmax) {
  at::Tensor row_max = std::get<0>(z.max(1));  // (n,)
  group.all_reduce_max(row_max);
  const at::Tensor target_logit = z.gather(1, column).squeeze(1).masked_fill(~here, 0.0);
  z.sub_(row_max.unsqueeze(1)).exp_();
  at::Tensor sums = at::stack({z.sum(1), target_logit});  // one all-reduce for both
  group.all_reduce_sum(sums);
  const at::Tensor sum_exp = sums[0];
  if (softmax) z.div_(sum_exp.unsqueeze(1));
  return sum_exp.log() + row_max - sums[1];
}

// One chunk of rows and what the head writes for it.
struct HeadChunk {
  at::Tensor x, targets;  // (n, C), (n,)
  at::Tensor losses, dx;  // (n,) and (n, C) slices of the pass's; dx undefined where not asked for
};

// What every chunk shares.
struct HeadProducts {
  at::Tensor w;           // (C, V_local) in the operand dtype
  at::Tensor dtable;      // (V_local, C) float32 accumulator; undefined where not asked for
  int64_t valid_local;    // columns at or past this are padding
  double rows_total;      // N: the loss is the mean over every row of the pass
};

// The CPU's chunk (and any split vocabulary): the product in the operand dtype (bf16 as autocast
// rounds it), the log-softmax and its gradient in float32, max and sum-exp reduced across the
// vocab group.
void vocab_parallel_chunk(const HeadChunk& c, const HeadProducts& p, const HeadShard& head) {
  const int64_t V = p.w.size(1);
  at::Tensor z = kernels::linear_forward(c.x, p.w, at::Tensor(), head.operand_dtype).to(at::kFloat);
  if (p.valid_local < V) z.narrow(1, p.valid_local, V - p.valid_local).fill_(-INFINITY);
  const at::Tensor local_target = c.targets - head.vocab_offset;
  const at::Tensor scored = c.targets >= 0;
  const at::Tensor here = (local_target >= 0) & (local_target < V) & scored;
  const at::Tensor column = local_target.masked_fill(~here, 0).unsqueeze(1);
  const bool grads = c.dx.defined() || p.dtable.defined();
  c.losses.copy_(row_losses(z, column, here, *head.vocab_group, grads).masked_fill_(~scored, 0.0));
  if (!grads) return;
  // d(sum of losses / N)/dz = (softmax - one_hot(target)) / N on scored rows, 0 elsewhere.
  z.scatter_add_(1, column, here.to(z.scalar_type()).neg().unsqueeze(1));
  z.mul_((scored.to(z.scalar_type()) / p.rows_total).unsqueeze(1));
  const at::Tensor dz = z.to(head.operand_dtype);
  if (c.dx.defined()) c.dx.copy_(kernels::linear_backward(c.x, p.w, dz, true, false, false, head.operand_dtype).dx);
  if (p.dtable.defined()) kernels::accumulate_weight_grad(p.dtable.t(), c.x, dz, head.operand_dtype);
}

// The GPU's chunk (the whole vocabulary on this rank): float32 logits straight from the product,
// then one kernel for the loss and softmax - one_hot in the operand dtype
// (kernels::softmax_cross_entropy); 1/N goes into the products (alpha, or the (n, C) rows of dx)
// and unscored rows are zeroed on the (n, C) side, so nothing else touches the (n, V) logits.
void whole_vocab_chunk(const HeadChunk& c, const HeadProducts& p, const HeadShard& head) {
  const bool grads = c.dx.defined() || p.dtable.defined();
  kernels::SoftmaxCrossEntropy loss = kernels::softmax_cross_entropy(
      kernels::product_float_out(c.x, p.w), c.targets, p.valid_local, grads, head.operand_dtype);
  c.losses.copy_(loss.losses);
  if (!grads) return;
  const at::Tensor scored = c.targets >= 0;
  if (c.dx.defined()) {
    const at::Tensor row_weight = (scored.to(at::kFloat) / p.rows_total).unsqueeze(1);  // (n, 1)
    c.dx.copy_(kernels::linear_backward(c.x, p.w, loss.grad, true, false, false, head.operand_dtype).dx.mul_(row_weight));
  }
  if (p.dtable.defined()) {
    const at::Tensor x_scored = c.x.to(head.operand_dtype).masked_fill(~scored.unsqueeze(1), 0);
    kernels::add_product_float_out(p.dtable.t(), x_scored.t(), loss.grad, 1.0 / p.rows_total);
  }
}

HeadPass run_head(const at::Tensor& x_in, const at::Tensor& stored, const at::Tensor& targets, const HeadShard& head,
                  bool need_dx, bool need_dtable) {
  const at::Tensor x = x_in.contiguous();
  const int64_t N = x.size(0);
  HeadPass pass;
  pass.losses = at::empty({N}, x.options().dtype(at::kFloat));  // the loss in float32 whatever x's dtype
  if (need_dx) pass.dx = at::empty_like(x);
  HeadProducts p;
  {
    const at::Tensor table = gathered_table(stored, head);  // (V_local, C)
    const int64_t V = table.size(0);
    SPMD_ASSERT(table.size(1) == x.size(1), "head: x has {} features, the table {}", x.size(1), table.size(1));
    // The products' (C, V_local) operand, rounded to the operand dtype once for all chunks.
    p.w = (head.operand_table.defined() ? head.operand_table : table.to(head.operand_dtype)).t();
    p.valid_local = std::clamp<int64_t>(head.valid_vocab - head.vocab_offset, 0, V);
    p.rows_total = static_cast<double>(N);
    if (need_dtable) p.dtable = at::zeros({V, x.size(1)}, table.options());  // float32, as the master table
    const bool generic = kernels::takes_generic_path(x.device());
    const bool whole_vocab = generic && head.vocab_group->size() == 1;
    const int64_t rows = head.chunk_rows > 0 ? head.chunk_rows : head_chunk_rows(V, N, generic);
    for (int64_t start = 0; start < N; start += rows) {
      const int64_t n = std::min(rows, N - start);
      const HeadChunk c{x.narrow(0, start, n), targets.narrow(0, start, n), pass.losses.narrow(0, start, n),
                        need_dx ? pass.dx.narrow(0, start, n) : at::Tensor()};
      if (whole_vocab) whole_vocab_chunk(c, p, head);
      else vocab_parallel_chunk(c, p, head);
    }
    p.w = at::Tensor();
  }  // the gathered table and its operand copy are freed here
  // FSDP: the table's gradient goes back to the shards now, so that only the shard's waits for backward.
  if (need_dtable) pass.dtable = head.gathers.empty() ? p.dtable : fsdp_reduce_scatter(p.dtable, head.gathers);
  return pass;
}

// Moves a gradient out of the node, so that autograd's accumulation can take it without a copy.
at::Tensor take(AutogradContext* ctx, const char* key) {
  auto it = ctx->saved_data.find(key);
  SPMD_ASSERT(it != ctx->saved_data.end(), "head_cross_entropy: backward ran twice over one graph");
  at::Tensor t = it->second.isTensor() ? it->second.toTensor() : at::Tensor();
  ctx->saved_data.erase(it);
  return t;
}

// The gradients are made in forward (for a loss gradient of 1) and scaled in backward.
struct HeadCrossEntropy : torch::autograd::Function<HeadCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& table,
                            const at::Tensor& targets, const HeadShard* head, bool need_dx, bool need_dtable) {
    HeadPass pass = run_head(x, table, targets, *head, need_dx, need_dtable);
    ctx->saved_data["dx"] = pass.dx;
    ctx->saved_data["dtable"] = pass.dtable;
    return pass.losses.mean();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor dx = take(ctx, "dx"), dtable = take(ctx, "dtable");
    for (at::Tensor* g : {&dx, &dtable})
      if (g->defined()) g->mul_(grads[0]);
    return {dx, dtable, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace


at::Tensor head_cross_entropy(const at::Tensor& x, const at::Tensor& table, const at::Tensor& targets,
                              const HeadShard& head) {
  const bool grad = at::GradMode::is_enabled();
  const bool need_dx = grad && x.requires_grad(), need_dtable = grad && table.requires_grad();
  if (!need_dx && !need_dtable) return head_token_losses(x, table, targets, head).mean();
  return HeadCrossEntropy::apply(x, table, targets, &head, need_dx, need_dtable);
}

at::Tensor head_token_losses(const at::Tensor& x, const at::Tensor& table, const at::Tensor& targets,
                             const HeadShard& head) {
  at::NoGradGuard no_grad;
  return run_head(x.detach(), table.detach(), targets, head, false, false).losses;
}

}  // namespace spmd
