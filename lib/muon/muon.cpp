// Muon over the mesh: momentum on the blocks, Newton-Schulz on the whole matrix at its owner.
#include "muon/muon.h"

#include <ATen/core/grad_mode.h>

#include "muon/muon_update.h"
#include "util/error.h"
#include "util/test_hooks.h"

namespace spmd {

namespace {
// Every mesh axis but the pipeline's: the ranks that hold one stage's parameters.
std::vector<std::string> muon_stage_axes(const ModelLayout& layout) {
  std::vector<std::string> axes;
  for (const auto& axis : layout.mesh.axes())
    if (axis != layout.pipeline.axis) axes.push_back(axis);
  return axes;
}
}  // namespace

Muon::Muon(ShardedModel& model, const MuonConfig& config) : model_(&model), config_(config) {
  const ModelLayout& layout = model.layout();
  const std::vector<std::string> axes = muon_stage_axes(layout);
  model.comm().create_group(axes);
  stage_group_ = &model.comm().along(axes);
  matrices_ = plan_muon_matrices(layout, model.comm().rank(), stage_group_->size(), config.ns_steps);
  momentum_.resize(layout.params.size());
  for (const MuonMatrix& m : matrices_) momentum_[m.param] = at::zeros_like(model.params()[m.param]).detach();
}

at::Tensor Muon::orthogonalized_block(const MuonMatrix& m, const at::Tensor& update_block) const {
  const ParamLayout& p = model_->layout().params[m.param];
  if (test_hooks().muon_per_shard)  // tests only: the blockwise algorithm this class exists to avoid
    return from_linear(newton_schulz(as_linear(update_block, p.info.input_dims), config_), update_block.sizes());
  const at::Tensor whole = model_->gather_shards(m.param, update_block);
  const at::ScalarType dtype = config_.ns_dtype == MatmulDtype::kFloat32 ? at::kFloat : at::kBFloat16;
  at::Tensor ortho = stage_group_->rank() == m.owner
                         ? from_linear(newton_schulz(as_linear(whole, p.info.input_dims), config_), p.info.shape)
                         : at::empty(p.info.shape, whole.options().dtype(dtype));
  if (stage_group_->size() > 1) {
    at::Tensor bytes = ortho.view(at::kByte);  // any dtype the backend carries: a copy of the bits
    stage_group_->broadcast(bytes, static_cast<int>(m.owner));
  }
  const auto offset = p.sharding.shard_offset(model_->comm().rank());
  const auto shape = p.sharding.shard_shape();
  for (size_t d = 0; d < shape.size(); ++d)
    ortho = ortho.narrow(static_cast<int64_t>(d), offset[d], shape[d]);
  return ortho;
}

void Muon::step(double lr, double grad_scale) {
  at::NoGradGuard no_grad;
  for (const MuonMatrix& m : matrices_) {
    at::Tensor& param = model_->params()[m.param];
    SPMD_ASSERT(param.grad().defined(), "Muon: {} has no gradient", model_->layout().params[m.param].info.name);
    const at::Tensor grad = grad_scale == 1.0 ? param.grad() : param.grad() * grad_scale;
    const at::Tensor update = muon_momentum_update(momentum_[m.param], grad, config_);
    const at::Tensor ortho = orthogonalized_block(m, update);
    muon_apply(param, ortho, lr, muon_adjusted_lr(lr, config_.adjust_lr_fn, m.rows, m.cols), config_.weight_decay);
  }
}

void Muon::step_on_device(double lr, const at::Tensor& grad_scale, const at::Tensor& apply) {
  at::NoGradGuard no_grad;
  for (const MuonMatrix& m : matrices_) {
    at::Tensor& param = model_->params()[m.param];
    at::Tensor& buf = momentum_[m.param];
    const at::Tensor grad = param.grad() * grad_scale;
    at::Tensor next_buf = buf.clone();
    const at::Tensor update = muon_momentum_update(next_buf, grad, config_);
    const at::Tensor ortho = orthogonalized_block(m, update);  // every rank takes part, applied or not
    at::Tensor next_param = param.detach().clone();
    muon_apply(next_param, ortho, lr, muon_adjusted_lr(lr, config_.adjust_lr_fn, m.rows, m.cols),
               config_.weight_decay);
    buf.copy_(at::where(apply, next_buf, buf));
    param.copy_(at::where(apply, next_param, param));
  }
}

int64_t Muon::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& buf : momentum_)
    if (buf.defined()) bytes += buf.numel() * static_cast<int64_t>(buf.element_size());
  return bytes;
}

double Muon::owned_flops() const {
  double flops = 0;
  for (const MuonMatrix& m : matrices_)
    if (m.owner == stage_group_->rank()) flops += m.cost;
  return flops;
}

}  // namespace spmd
