// Bucketed data-parallel gradient averaging and the global-norm computation.
#include "parallel/grad_sync.h"

#include <algorithm>
#include <map>

#include "kernels/kernels.h"
#include "util/error.h"

namespace spmd {

GradientSync::GradientSync(ShardedModel& model, int64_t bucket_bytes)
    : model_(model), bucket_of_(model.params().size(), -1), arrived_(model.params().size(), false) {
  const auto& layout = model.layout();
  auto& params = model.params();
  std::map<std::vector<std::string>, int> open_bucket;  // group axes -> the bucket being filled
  std::vector<int64_t> numel;                           // per bucket, so far
  for (size_t k = params.size(); k-- > 0;) {
    if (!model.holds(k)) continue;  // another pipeline stage's
    const auto axes = gradient_sum_axes(layout, layout.params[k]);
    const Group& group = model.comm().along(axes);
    if (group.size() == 1) continue;
    auto it = open_bucket.find(axes);
    const int64_t bytes_per_element = static_cast<int64_t>(params[k].element_size());
    if (it == open_bucket.end() ||
        (bucket_bytes > 0 && (numel[it->second] + params[k].numel()) * bytes_per_element > bucket_bytes)) {
      buckets_.emplace_back();
      buckets_.back().group = &group;
      numel.push_back(0);
      open_bucket[axes] = static_cast<int>(buckets_.size()) - 1;
    }
    const int index = open_bucket[axes];
    Bucket& b = buckets_[static_cast<size_t>(index)];
    b.offsets.push_back(numel[index]);
    b.params.push_back(k);
    numel[index] += params[k].numel();
    bucket_of_[k] = index;
  }
  for (size_t i = 0; i < buckets_.size(); ++i)
    buckets_[i].buffer = at::empty({numel[i]}, params[static_cast<size_t>(buckets_[i].params[0])].options());
  for (size_t k = 0; k < params.size(); ++k) {
    if (!model.holds(k)) continue;
    hook_ids_.emplace_back(k, params[k].register_hook([this, k](const at::Tensor& grad) {
      on_gradient(k, grad);
      return at::Tensor();  // the gradient itself is unchanged
    }));
  }
}

GradientSync::~GradientSync() {
  for (const auto& [k, id] : hook_ids_) model_.params()[k].remove_hook(id);
}

void GradientSync::begin(int64_t microbatches) {
  SPMD_ASSERT(microbatches >= 1, "GradientSync::begin: {} microbatches", microbatches);
  for (auto& p : model_.params())
    if (p.defined()) p.mutable_grad() = at::Tensor();
  std::fill(arrived_.begin(), arrived_.end(), false);
  started_early_ = 0;
  for (auto& b : buckets_) {
    b.arrived = 0;
    b.started = false;
  }
  microbatches_ = microbatches;
  armed_ = false;
}

void GradientSync::arm() { armed_ = true; }

void GradientSync::on_gradient(size_t k, const at::Tensor& grad) {
  if (!armed_ || bucket_of_[k] < 0) return;
  SPMD_ASSERT(!arrived_[k], "parameter {} got two gradients in one backward", k);
  arrived_[k] = true;
  Bucket& b = buckets_[static_cast<size_t>(bucket_of_[k])];
  const size_t slot = static_cast<size_t>(std::find(b.params.begin(), b.params.end(), k) - b.params.begin());
  at::Tensor into = b.buffer.narrow(0, b.offsets[slot], grad.numel()).view_as(grad);
  // The earlier microbatches' sum, if any. (Autograd still adds `grad` to .grad after this hook;
  // finish() replaces .grad with the bucket's view.)
  const at::Tensor& earlier = model_.params()[k].grad();
  if (earlier.defined()) at::add_out(into, earlier, grad);
  else into.copy_(grad);
  if (++b.arrived == b.params.size()) {
    start(b);
    ++started_early_;
    ++total_started_early_;
  }
}

void GradientSync::start(Bucket& b) {
  b.started = true;
  b.pending = b.group->all_reduce_sum_async(b.buffer);
  ++total_reductions_;
}

void GradientSync::finish() {
  armed_ = false;
  auto& params = model_.params();
  // Buckets whose every gradient did not arrive in the last backward (a parameter unused there):
  // the earlier microbatches' sum or zeros for the missing ones. The same buckets on every rank,
  // since every rank ran the same graph.
  for (auto& b : buckets_) {
    if (b.started) continue;
    for (size_t j = 0; j < b.params.size(); ++j) {
      if (arrived_[b.params[j]]) continue;
      const at::Tensor& p = params[b.params[j]];
      at::Tensor into = b.buffer.narrow(0, b.offsets[j], p.numel());
      if (p.grad().defined()) into.view_as(p).copy_(p.grad());
      else into.zero_();
    }
    start(b);
  }
  // Each rank's loss is the mean over its own tokens: all ranks' tokens are equally many.
  const double scale = 1.0 / static_cast<double>(model_.layout().token_split() * microbatches_);
  for (auto& b : buckets_) {
    b.pending.wait();
    b.buffer.mul_(scale);
    for (size_t j = 0; j < b.params.size(); ++j) {
      at::Tensor& p = params[b.params[j]];
      p.mutable_grad() = b.buffer.narrow(0, b.offsets[j], p.numel()).view_as(p);
    }
  }
  for (size_t k = 0; k < params.size(); ++k) {
    if (bucket_of_[k] >= 0 || !model_.holds(k)) continue;
    if (!params[k].grad().defined()) params[k].mutable_grad() = at::zeros_like(params[k]);
    else if (scale != 1.0) params[k].mutable_grad().mul_(scale);
  }
  sum_over_stages();
}

void GradientSync::sum_over_stages() {
  auto& params = model_.params();
  for (size_t k = 0; k < params.size(); ++k) {
    const Placement& placed = model_.layout().params[k].sharding.placement();
    if (!model_.holds(k) || placed.indices.size() < 2) continue;
    std::vector<at::Tensor> parts = exchange_with_holders(params[k].grad(), placed, kSharedGradientTag + static_cast<int>(k));
    at::Tensor sum = parts[0].clone();
    for (size_t j = 1; j < parts.size(); ++j) sum.add_(parts[j]);
    params[k].mutable_grad() = sum.to(params[k].device());
  }
}

std::vector<at::Tensor> GradientSync::exchange_with_holders(const at::Tensor& mine, const Placement& placed, int tag) {
  // NCCL pairs a send with the peer's receive in stream order: the lower stage sends first, the
  // higher receives first. Gloo (host memory; a no-op copy on the CPU) accepts that order too.
  const bool nccl = model_.comm().runtime().backend == "nccl";
  const Group& line = nccl ? model_.comm().along({placed.axis}) : model_.comm().host_along({placed.axis});
  const at::Tensor own = nccl ? mine.contiguous() : mine.to(at::kCPU).contiguous();
  std::vector<at::Tensor> parts;  // every holder's, in stage order
  std::vector<PendingCollective> sends;
  for (int64_t stage : placed.indices) {
    const int peer = static_cast<int>(stage);
    if (peer == line.rank()) {
      parts.push_back(own);
      continue;
    }
    parts.push_back(at::empty_like(own));
    if (line.rank() < peer) sends.push_back(line.send_async(own, peer, tag));
    line.receive(parts.back(), peer, tag);
    if (line.rank() > peer) sends.push_back(line.send_async(own, peer, tag));
  }
  for (auto& send : sends) send.wait();
  return parts;
}

at::Tensor global_grad_norm(const ShardedModel& model) {
  const auto& layout = model.layout();
  const int64_t rank = model.comm().rank();
  // Accumulated on the device in double: no host sync until someone reads it.
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < model.params().size(); ++i) {
    if (!layout.params[i].sharding.is_primary_replica(rank)) continue;
    const at::Tensor& g = model.params()[i].grad();
    if (g.defined()) grads.push_back(g);
  }
  at::Tensor total = kernels::sum_of_squares(grads, model.comm().device()).reshape({1});
  model.comm().world().all_reduce_sum(total);
  return total.sqrt_().reshape({});
}

}  // namespace spmd
