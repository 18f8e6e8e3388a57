// The autograd Functions behind collectives.h.
#include "comm/collectives.h"

#include <torch/csrc/autograd/custom_function.h>

namespace spmd {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group goes into the context as its handle.
void save_group(AutogradContext* ctx, const Group& group) {
  ctx->saved_data["group"] = group_handle(group);
}
const Group& saved_group(AutogradContext* ctx) {
  return group_from_handle(ctx->saved_data["group"].toInt());
}

struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Group* group) {
    save_group(ctx, *group);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor g = grads[0].contiguous().clone();
    saved_group(ctx).all_reduce_sum(g);
    return {g, at::Tensor()};
  }
};

struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Group* group) {
    at::Tensor y = x.contiguous().clone();
    group->all_reduce_sum(y);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) { return {grads[0], at::Tensor()}; }
};

struct GatherParams : torch::autograd::Function<GatherParams> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim, const Group* group) {
    save_group(ctx, *group);
    ctx->saved_data["dim"] = dim;
    return group->all_gather(x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    int64_t dim = ctx->saved_data["dim"].toInt();
    return {saved_group(ctx).reduce_scatter_sum(grads[0], dim), at::Tensor(), at::Tensor()};
  }
};

struct ReduceScatterToGroup : torch::autograd::Function<ReduceScatterToGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim, const Group* group) {
    save_group(ctx, *group);
    ctx->saved_data["dim"] = dim;
    return group->reduce_scatter_sum(x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    int64_t dim = ctx->saved_data["dim"].toInt();
    return {saved_group(ctx).all_gather(grads[0], dim), at::Tensor(), at::Tensor()};
  }
};

struct GatherFromGroup : torch::autograd::Function<GatherFromGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim, const Group* group) {
    save_group(ctx, *group);
    ctx->saved_data["dim"] = dim;
    return group->all_gather(x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Group& group = saved_group(ctx);
    int64_t dim = ctx->saved_data["dim"].toInt();
    return {grads[0].chunk(group.size(), dim)[group.rank()].contiguous(), at::Tensor(), at::Tensor()};
  }
};

struct ScatterToGroup : torch::autograd::Function<ScatterToGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim, const Group* group) {
    save_group(ctx, *group);
    ctx->saved_data["dim"] = dim;
    return x.chunk(group->size(), dim)[group->rank()].contiguous();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    int64_t dim = ctx->saved_data["dim"].toInt();
    return {saved_group(ctx).all_gather(grads[0], dim), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor copy_to_group(const at::Tensor& x, const Group& group) {
  return group.size() == 1 ? x : CopyToGroup::apply(x, &group);
}
at::Tensor reduce_from_group(const at::Tensor& x, const Group& group) {
  return group.size() == 1 ? x : ReduceFromGroup::apply(x, &group);
}
at::Tensor gather_params_from_group(const at::Tensor& x, int64_t dim, const Group& group) {
  return group.size() == 1 ? x : GatherParams::apply(x, dim, &group);
}
at::Tensor reduce_scatter_to_group(const at::Tensor& x, int64_t dim, const Group& group) {
  return group.size() == 1 ? x : ReduceScatterToGroup::apply(x, dim, &group);
}
at::Tensor gather_from_group(const at::Tensor& x, int64_t dim, const Group& group) {
  return group.size() == 1 ? x : GatherFromGroup::apply(x, dim, &group);
}
at::Tensor scatter_to_group(const at::Tensor& x, int64_t dim, const Group& group) {
  return group.size() == 1 ? x : ScatterToGroup::apply(x, dim, &group);
}

}  // namespace spmd
