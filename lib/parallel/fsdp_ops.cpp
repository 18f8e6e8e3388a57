// The autograd nodes behind fsdp_ops.h. Each layer saves its input and the weight's index; the
// backward gathers the weight again (the same collectives, in the same order on every rank,
// because every rank runs the same graph) and hands the full gradient to the unit's node.
#include "parallel/fsdp_ops.h"

#include <torch/csrc/autograd/custom_function.h>

#include "kernels/kernels.h"

namespace spmd {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using Pass = FsdpPrefetcher::Pass;

// The weight goes into the context as its index and the prefetcher as a handle; the prefetcher
// (the ShardedModel's) outlives every graph.
void save_weight(AutogradContext* ctx, size_t index, FsdpPrefetcher* prefetcher) {
  ctx->saved_data["index"] = static_cast<int64_t>(index);
  ctx->saved_data["prefetcher"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(prefetcher));
}
FsdpPrefetcher& saved_prefetcher(AutogradContext* ctx) {
  return *reinterpret_cast<FsdpPrefetcher*>(static_cast<intptr_t>(ctx->saved_data["prefetcher"].toInt()));
}
at::Tensor gather_in_backward(AutogradContext* ctx) {
  return saved_prefetcher(ctx).gather(static_cast<size_t>(ctx->saved_data["index"].toInt()), Pass::kBackward);
}

// The gathered weight as the (K, N) operand of x (rows, K).
at::Tensor as_matrix(const at::Tensor& w, int64_t k, bool transposed) { return transposed ? w.t() : w.reshape({k, -1}); }

// The unit's node: its inputs are the unit's shards, its outputs stand-ins of their gathered
// shapes (no memory: every stride 0). Autograd runs its backward once every layer using the
// unit has given its gradients: one reduce-scatter for all of them.
struct FsdpUnitGrads : torch::autograd::Function<FsdpUnitGrads> {
  static variable_list forward(AutogradContext* ctx, at::TensorList /*shards*/, FsdpPrefetcher* prefetcher,
                               int64_t unit) {
    ctx->set_materialize_grads(false);  // a weight without a gradient in this pass: left out of the collective
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["prefetcher"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(prefetcher));
    variable_list handles;
    for (size_t k : prefetcher->unit_params(unit)) {
      const std::vector<int64_t> shape = prefetcher->gathered_shape(k);
      handles.push_back(at::empty_strided(shape, std::vector<int64_t>(shape.size(), 0), prefetcher->shard(k).options()));
    }
    return handles;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out = saved_prefetcher(ctx).reduce_scatter(ctx->saved_data["unit"].toInt(), grads);
    out.insert(out.end(), {at::Tensor(), at::Tensor()});
    return out;
  }
};

// A gathered weight autograd may keep (a bias): the gradient passes through to its handle.
struct FsdpUse : torch::autograd::Function<FsdpUse> {
  static at::Tensor forward(AutogradContext*, const at::Tensor&, int64_t index, FsdpPrefetcher* prefetcher) {
    return prefetcher->gather(static_cast<size_t>(index), Pass::kForward).detach();  // a tensor of its own
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor(), at::Tensor()}; }
};

// An absent bias travels as an empty tensor, so every autograd input is a defined tensor.
struct FsdpLinear : torch::autograd::Function<FsdpLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& /*handle*/,
                            const at::Tensor& bias, int64_t index, FsdpPrefetcher* prefetcher, bool transposed,
                            at::ScalarType operand_dtype) {
    save_weight(ctx, static_cast<size_t>(index), prefetcher);
    ctx->saved_data["transposed"] = transposed;
    ctx->saved_data["operand_dtype"] = static_cast<int64_t>(operand_dtype);
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    ctx->save_for_backward({x});
    at::Tensor w = as_matrix(prefetcher->gather(static_cast<size_t>(index), Pass::kForward), x.size(1), transposed);
    return kernels::linear_forward(x, w, bias.numel() > 0 ? bias : at::Tensor(), operand_dtype);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const bool transposed = ctx->saved_data["transposed"].toBool();
    at::Tensor full = gather_in_backward(ctx);
    kernels::LinearGrads g = kernels::linear_backward(
        x, as_matrix(full, x.size(1), transposed), grads[0], ctx->needs_input_grad(0), ctx->needs_input_grad(1),
        ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2),
        static_cast<at::ScalarType>(ctx->saved_data["operand_dtype"].toInt()));
    at::Tensor dfull;
    if (g.dw.defined()) dfull = transposed ? g.dw.t() : g.dw.reshape(full.sizes());
    return {g.dx, dfull, g.dbias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct FsdpEmbedding : torch::autograd::Function<FsdpEmbedding> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& /*handle*/, const at::Tensor& ids, int64_t index,
                            FsdpPrefetcher* prefetcher) {
    at::Tensor table = prefetcher->gather(static_cast<size_t>(index), Pass::kForward);
    ctx->saved_data["rows"] = table.size(0);
    ctx->save_for_backward({ids});
    return at::embedding(table, ids);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor ids = ctx->get_saved_variables()[0];
    at::Tensor dtable = at::embedding_dense_backward(grads[0].contiguous(), ids, ctx->saved_data["rows"].toInt(),
                                                     /*padding_idx=*/-1, /*scale_grad_by_freq=*/false);
    return {dtable, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct FsdpLayerNorm : torch::autograd::Function<FsdpLayerNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& /*handle*/,
                            const at::Tensor& bias, int64_t index, FsdpPrefetcher* prefetcher, double eps) {
    const at::Tensor x = x_in.contiguous();
    const int64_t C = x.size(-1);
    at::Tensor w = prefetcher->gather(static_cast<size_t>(index), Pass::kForward);
    c10::optional<at::Tensor> b = bias.numel() > 0 ? c10::optional<at::Tensor>(bias) : c10::nullopt;
    auto [y, mean, rstd] = at::native_layer_norm(x, {C}, w, b, eps);
    save_weight(ctx, static_cast<size_t>(index), prefetcher);
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    ctx->save_for_backward({x, mean, rstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &mean = saved[1], &rstd = saved[2];
    const at::Tensor dy = grads[0].contiguous();
    const int64_t C = x.size(-1);
    at::Tensor w = gather_in_backward(ctx);
    auto [dx, dw, unused] = at::native_layer_norm_backward(
        dy, x, {C}, mean, rstd, w, c10::nullopt, {ctx->needs_input_grad(0), ctx->needs_input_grad(1), false});
    at::Tensor dbias;
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) dbias = dy.reshape({-1, C}).sum(0);
    return {dx, dw, dbias, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor bias_or_empty(const at::Tensor& bias, const at::Tensor& like) {
  return bias.defined() ? bias : at::empty({0}, like.options());
}

int64_t index_of(const FsdpWeight& w) { return static_cast<int64_t>(w.index); }

// Without grad mode the weight has no handle: an empty tensor stands in (autograd's inputs are
// defined tensors).
at::Tensor handle_or_empty(const FsdpWeight& w, const at::Tensor& like) {
  return w.grad_handle.defined() ? w.grad_handle : at::empty({0}, like.options());
}

}  // namespace

std::vector<at::Tensor> fsdp_unit_grad_handles(FsdpPrefetcher& prefetcher, int64_t unit) {
  variable_list shards;
  for (size_t k : prefetcher.unit_params(unit)) shards.push_back(prefetcher.shard(k));
  return FsdpUnitGrads::apply(at::TensorList(shards), &prefetcher, unit);  // the list's overload: each a variable
}

at::Tensor fsdp_param(const FsdpWeight& w) {
  if (!w.grad_handle.defined()) return w.prefetcher->gather(w.index, Pass::kForward);
  return FsdpUse::apply(w.grad_handle, index_of(w), w.prefetcher);
}

at::Tensor fsdp_linear(const at::Tensor& x, const FsdpWeight& w, bool transposed, const at::Tensor& bias,
                       at::ScalarType operand_dtype) {
  return FsdpLinear::apply(x, handle_or_empty(w, x), bias_or_empty(bias, x), index_of(w), w.prefetcher, transposed, operand_dtype);
}

at::Tensor fsdp_embedding(const at::Tensor& ids, const FsdpWeight& table) {
  return FsdpEmbedding::apply(handle_or_empty(table, table.prefetcher->shard(table.index)), ids, index_of(table), table.prefetcher);
}

at::Tensor fsdp_layer_norm(const at::Tensor& x, const FsdpWeight& w, const at::Tensor& bias, double eps) {
  return FsdpLayerNorm::apply(x, handle_or_empty(w, x), bias_or_empty(bias, x), index_of(w), w.prefetcher, eps);
}

}  // namespace spmd
