// The autograd nodes behind fsdp_ops.h. Each saves its input and the weight's *shard*; the
// backward gathers the weight again (the same collectives, in the same order on every rank,
// because every rank runs the same graph).
#include "parallel/fsdp_ops.h"

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/kernels.h"

namespace spmd {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using Pass = FsdpPrefetcher::Pass;

// The gathers go into the context as (dim, group handle) pairs, the prefetcher as a handle (0:
// none); both outlive every graph (the Communicator's groups, the ShardedModel's prefetcher).
void save_gathers(AutogradContext* ctx, const FsdpGathers& gathers, FsdpPrefetcher* prefetcher) {
  std::vector<int64_t> flat;
  for (const auto& [dim, group] : gathers) {
    flat.push_back(dim);
    flat.push_back(group_handle(*group));
  }
  ctx->saved_data["gathers"] = flat;
  ctx->saved_data["prefetcher"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(prefetcher));
}
FsdpGathers saved_gathers(AutogradContext* ctx) {
  std::vector<int64_t> flat = ctx->saved_data["gathers"].toIntVector();
  FsdpGathers gathers;
  for (size_t i = 0; i + 1 < flat.size(); i += 2)
    gathers.emplace_back(flat[i], &group_from_handle(flat[i + 1]));
  return gathers;
}

// The gathered weight, through the prefetcher where there is one.
at::Tensor gather(const at::Tensor& shard, const FsdpGathers& gathers, FsdpPrefetcher* prefetcher, Pass pass) {
  return prefetcher ? prefetcher->gather(shard, gathers, pass) : fsdp_gather(shard, gathers);
}
at::Tensor gather_in_backward(AutogradContext* ctx, const at::Tensor& shard, const FsdpGathers& gathers) {
  auto* prefetcher = reinterpret_cast<FsdpPrefetcher*>(static_cast<intptr_t>(ctx->saved_data["prefetcher"].toInt()));
  return gather(shard, gathers, prefetcher, Pass::kBackward);
}

// The gathered weight as the (K, N) operand of x (rows, K).
at::Tensor as_matrix(const at::Tensor& w, int64_t k, bool transposed) { return transposed ? w.t() : w.reshape({k, -1}); }

// An absent bias travels as an empty tensor, so every autograd input is a defined tensor.
struct FsdpLinear : torch::autograd::Function<FsdpLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& shard,
                            const at::Tensor& bias, const FsdpGathers* gathers, bool transposed,
                            FsdpPrefetcher* prefetcher, at::ScalarType operand_dtype) {
    save_gathers(ctx, *gathers, prefetcher);
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["operand_dtype"] = static_cast<int64_t>(operand_dtype);
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    ctx->save_for_backward({x, shard});
    at::Tensor w = as_matrix(gather(shard, *gathers, prefetcher, Pass::kForward), x.size(1), transposed);
    return kernels::linear_forward(x, w, bias.numel() > 0 ? bias : at::Tensor(), operand_dtype);
  }  // the gathered weight is freed here

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& shard = saved[1];
    const FsdpGathers gathers = saved_gathers(ctx);
    const bool transposed = ctx->saved_data["transposed"].toBool();
    at::Tensor full = gather_in_backward(ctx, shard, gathers);
    kernels::LinearGrads g = kernels::linear_backward(
        x, as_matrix(full, x.size(1), transposed), grads[0], ctx->needs_input_grad(0), ctx->needs_input_grad(1),
        ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2),
        static_cast<at::ScalarType>(ctx->saved_data["operand_dtype"].toInt()));
    at::Tensor dshard;
    if (g.dw.defined()) {
      at::Tensor dfull = transposed ? g.dw.t() : g.dw.reshape(full.sizes());
      full = at::Tensor();  // free the gathered weight before the gradient's collective
      dshard = fsdp_reduce_scatter(dfull.contiguous(), gathers);
    }
    return {g.dx, dshard, g.dbias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct FsdpEmbedding : torch::autograd::Function<FsdpEmbedding> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& shard, const at::Tensor& ids,
                            const FsdpGathers* gathers, FsdpPrefetcher* prefetcher) {
    at::Tensor table = gather(shard, *gathers, prefetcher, Pass::kForward);
    save_gathers(ctx, *gathers, prefetcher);
    ctx->saved_data["rows"] = table.size(0);
    ctx->save_for_backward({ids});
    return at::embedding(table, ids);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor ids = ctx->get_saved_variables()[0];
    at::Tensor dtable = at::embedding_dense_backward(grads[0].contiguous(), ids, ctx->saved_data["rows"].toInt(),
                                                     /*padding_idx=*/-1, /*scale_grad_by_freq=*/false);
    return {fsdp_reduce_scatter(dtable, saved_gathers(ctx)), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct FsdpLayerNorm : torch::autograd::Function<FsdpLayerNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& shard,
                            const at::Tensor& bias, const FsdpGathers* gathers, double eps,
                            FsdpPrefetcher* prefetcher) {
    const at::Tensor x = x_in.contiguous();
    const int64_t C = x.size(-1);
    at::Tensor w = gather(shard, *gathers, prefetcher, Pass::kForward);
    c10::optional<at::Tensor> b = bias.numel() > 0 ? c10::optional<at::Tensor>(bias) : c10::nullopt;
    auto [y, mean, rstd] = at::native_layer_norm(x, {C}, w, b, eps);
    save_gathers(ctx, *gathers, prefetcher);
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    ctx->save_for_backward({x, shard, mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &shard = saved[1], &mean = saved[2], &rstd = saved[3];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t C = x.size(-1);
    const FsdpGathers gathers = saved_gathers(ctx);
    at::Tensor w = gather_in_backward(ctx, shard, gathers);
    auto [dx, dw, unused] = at::native_layer_norm_backward(
        dy, x, {C}, mean, rstd, w, c10::nullopt, {ctx->needs_input_grad(0), ctx->needs_input_grad(1), false});
    at::Tensor dbias;
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) dbias = dy.reshape({-1, C}).sum(0);
    at::Tensor dshard = dw.defined() ? fsdp_reduce_scatter(dw, gathers) : at::Tensor();
    return {dx, dshard, dbias, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor bias_or_empty(const at::Tensor& bias, const at::Tensor& like) {
  return bias.defined() ? bias : at::empty({0}, like.options());
}

}  // namespace

at::Tensor fsdp_linear(const at::Tensor& x, const at::Tensor& weight_shard, const FsdpGathers& gathers,
                       bool transposed, const at::Tensor& bias, FsdpPrefetcher* prefetcher,
                       at::ScalarType operand_dtype) {
  return FsdpLinear::apply(x, weight_shard, bias_or_empty(bias, x), &gathers, transposed, prefetcher, operand_dtype);
}

at::Tensor fsdp_embedding(const at::Tensor& ids, const at::Tensor& table_shard, const FsdpGathers& gathers,
                          FsdpPrefetcher* prefetcher) {
  return FsdpEmbedding::apply(table_shard, ids, &gathers, prefetcher);
}

at::Tensor fsdp_layer_norm(const at::Tensor& x, const at::Tensor& weight_shard, const FsdpGathers& gathers,
                           const at::Tensor& bias, double eps, FsdpPrefetcher* prefetcher) {
  return FsdpLayerNorm::apply(x, weight_shard, bias_or_empty(bias, x), &gathers, eps, prefetcher);
}

}  // namespace spmd
