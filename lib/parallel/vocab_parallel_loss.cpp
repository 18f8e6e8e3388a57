// The autograd Function behind vocab_parallel_cross_entropy.
#include "parallel/vocab_parallel_loss.h"

#include <torch/csrc/autograd/custom_function.h>

namespace spmd {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t vocab_offset, int64_t valid_vocab, const Group* group) {
    const int64_t N = logits.size(0), V = logits.size(1);
    at::Tensor z = logits;
    int64_t valid_local = std::clamp<int64_t>(valid_vocab - vocab_offset, 0, V);
    if (valid_local < V) {  // padded columns never enter the softmax
      z = logits.clone();
      z.narrow(1, valid_local, V - valid_local).fill_(-INFINITY);
    }
    at::Tensor row_max = std::get<0>(z.max(1));  // (N,)
    group->all_reduce_max(row_max);
    at::Tensor exp = (z - row_max.unsqueeze(1)).exp_();  // (N, V)
    at::Tensor sum_exp = exp.sum(1);
    group->all_reduce_sum(sum_exp);
    // The target's logit lives on exactly one member.
    at::Tensor local_target = targets - vocab_offset;
    at::Tensor here = (local_target >= 0) & (local_target < V);
    at::Tensor safe_target = local_target.masked_fill(~here, 0);
    at::Tensor target_logit = z.gather(1, safe_target.unsqueeze(1)).squeeze(1).masked_fill(~here, 0.0);
    group->all_reduce_sum(target_logit);
    at::Tensor loss = (sum_exp.log() + row_max - target_logit).mean();

    exp.div_(sum_exp.unsqueeze(1));  // softmax, kept for backward
    ctx->save_for_backward({exp, safe_target, here});
    ctx->saved_data["N"] = N;
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

}  // namespace spmd
