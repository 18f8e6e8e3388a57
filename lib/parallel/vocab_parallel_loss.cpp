// The autograd Function behind vocab_parallel_cross_entropy.
#include "parallel/vocab_parallel_loss.h"

#include <torch/csrc/autograd/custom_function.h>

namespace spmd {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Each row's loss, and what backward needs of it.
struct TokenLosses {
  at::Tensor losses;       // (N,)
  at::Tensor exp, sum_exp;  // exp(z - row max) (N, V), and its sums over the whole vocabulary (N,)
  at::Tensor safe_target, here;  // the target's local column (0 where elsewhere), and whether it is here
};

TokenLosses token_losses(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_offset, int64_t valid_vocab,
                     const Group& group) {
  const int64_t V = logits.size(1);
  at::Tensor z = logits;
  int64_t valid_local = std::clamp<int64_t>(valid_vocab - vocab_offset, 0, V);
  if (valid_local < V) {  // padded columns never enter the softmax
    z = logits.clone();
    z.narrow(1, valid_local, V - valid_local).fill_(-INFINITY);
  }
  at::Tensor row_max = std::get<0>(z.max(1));  // (N,)
  group.all_reduce_max(row_max);
  TokenLosses r;
  r.exp = (z - row_max.unsqueeze(1)).exp_();  // (N, V)
  r.sum_exp = r.exp.sum(1);
  group.all_reduce_sum(r.sum_exp);
  // The target's logit lives on exactly one member.
  at::Tensor local_target = targets - vocab_offset;
  r.here = (local_target >= 0) & (local_target < V);
  r.safe_target = local_target.masked_fill(~r.here, 0);
  at::Tensor target_logit = z.gather(1, r.safe_target.unsqueeze(1)).squeeze(1).masked_fill(~r.here, 0.0);
  group.all_reduce_sum(target_logit);
  r.losses = r.sum_exp.log() + row_max - target_logit;
  return r;
}

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_offset, int64_t valid_vocab, const Group* group) {
    TokenLosses rows = token_losses(logits, targets, vocab_offset, valid_vocab, *group);
    at::Tensor loss = rows.losses.mean();
    rows.exp.div_(rows.sum_exp.unsqueeze(1));  // softmax, kept for backward
    ctx->save_for_backward({rows.exp, rows.safe_target, rows.here});
    ctx->saved_data["N"] = logits.size(0);
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0].clone();  // softmax - one_hot(target), scaled by dloss / N
    at::Tensor rows = at::arange(grad.size(0), saved[1].options());
    grad.index_put_({rows, saved[1]}, grad.index({rows, saved[1]}) - saved[2].to(grad.scalar_type()));
    grad.mul_(grads[0] / static_cast<double>(ctx->saved_data["N"].toInt()));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_offset,
                                        int64_t valid_vocab, const Group& group) {
  return VocabParallelCrossEntropy::apply(logits, targets, vocab_offset, valid_vocab, &group);
}

at::Tensor vocab_parallel_token_losses(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_offset,
                                       int64_t valid_vocab, const Group& group) {
  const at::Tensor losses = token_losses(logits.detach(), targets, vocab_offset, valid_vocab, group).losses;
  return losses.masked_fill(targets < 0, 0.0);
}

}  // namespace spmd
