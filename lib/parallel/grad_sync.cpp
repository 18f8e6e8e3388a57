// Bucketed data-parallel gradient averaging and the global-norm computation.
#include "parallel/grad_sync.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "kernels/kernels.h"
#include "util/error.h"

namespace spmd {

namespace {
// Runs after autograd has added a backward's gradient into the parameter's .grad (the bucket's
// view), so the bucket's all-reduce never races the accumulation.
class AfterAccumulation : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit AfterAccumulation(std::function<void()> done) : done_(std::move(done)) {}
  void operator()(const torch::autograd::Variable&) override { done_(); }

 private:
  std::function<void()> done_;
};
}  // namespace

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
    if (bucket_of_[k] < 0) continue;
    torch::autograd::impl::set_post_acc_grad_hooks(params[k], std::make_unique<AfterAccumulation>([this, k] { on_gradient(k); }));
  }
}

GradientSync::~GradientSync() {
  for (size_t k = 0; k < bucket_of_.size(); ++k)
    if (bucket_of_[k] >= 0) torch::autograd::impl::set_post_acc_grad_hooks(model_.params()[k], nullptr);
}

at::Tensor GradientSync::bucket_view(size_t k) const {
  const Bucket& b = buckets_[static_cast<size_t>(bucket_of_[k])];
  const size_t slot = static_cast<size_t>(std::find(b.params.begin(), b.params.end(), k) - b.params.begin());
  const at::Tensor& p = model_.params()[k];
  return b.buffer.narrow(0, b.offsets[slot], p.numel()).view_as(p);
}

int64_t GradientSync::bucket_bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) bytes += static_cast<int64_t>(b.buffer.nbytes());
  return bytes;
}

int64_t GradientSync::grads_outside_buckets() const {
  int64_t outside = 0;
  for (size_t k = 0; k < bucket_of_.size(); ++k) {
    if (bucket_of_[k] < 0) continue;
    const at::Tensor& grad = model_.params()[k].grad();
    const at::Tensor& buffer = buckets_[static_cast<size_t>(bucket_of_[k])].buffer;
    const auto* begin = static_cast<const char*>(buffer.data_ptr());
    const auto* first = grad.defined() ? static_cast<const char*>(grad.data_ptr()) : nullptr;
    if (first == nullptr || first < begin || first + grad.nbytes() > begin + buffer.nbytes()) ++outside;
  }
  return outside;
}

void GradientSync::begin(int64_t microbatches) {
  SPMD_ASSERT(microbatches >= 1, "GradientSync::begin: {} microbatches", microbatches);
  // A bucketed parameter's .grad is its slot of the bucket, zeroed: every backward adds into it in
  // place (autograd accumulates into a defined .grad), so no second gradient-sized buffer exists
  // (PyTorch DDP's gradient_as_bucket_view). The others start undefined.
  auto& params = model_.params();
  for (auto& b : buckets_) b.buffer.zero_();
  for (size_t k = 0; k < params.size(); ++k) {
    if (!params[k].defined()) continue;
    params[k].mutable_grad() = bucket_of_[k] >= 0 ? bucket_view(k) : at::Tensor();
  }
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

void GradientSync::on_gradient(size_t k) {
  if (!armed_) return;
  SPMD_ASSERT(!arrived_[k], "parameter {} got two gradients in one backward", k);
  arrived_[k] = true;
  // The slot already holds the earlier microbatches' sum plus this one's (the bucket is .grad).
  SPMD_ASSERT(model_.params()[k].grad().data_ptr() == bucket_view(k).data_ptr(),
              "parameter {}: .grad left its gradient bucket", k);
  Bucket& b = buckets_[static_cast<size_t>(bucket_of_[k])];
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
  // their slots hold the earlier microbatches' sum, or begin()'s zeros. The same buckets on every
  // rank, since every rank ran the same graph.
  for (auto& b : buckets_)
    if (!b.started) start(b);
  // Each rank's loss is the mean over its own tokens: all ranks' tokens are equally many.
  const double scale = 1.0 / static_cast<double>(model_.layout().token_split() * microbatches_);
  for (auto& b : buckets_) {
    b.pending.wait();
    b.buffer.mul_(scale);
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
  // The shared parameters by the stages holding them, in parameter order (the same on every holder).
  std::map<std::pair<std::string, std::vector<int64_t>>, std::vector<size_t>> shared;
  for (size_t k = 0; k < params.size(); ++k) {
    const Placement& placed = model_.layout().params[k].sharding.placement();
    if (model_.holds(k) && placed.indices.size() >= 2) shared[{placed.axis, placed.indices}].push_back(k);
  }
  int tag = kSharedGradientTag;
  for (const auto& [holders, ks] : shared) {
    const Placement& placed = model_.layout().params[ks[0]].sharding.placement();
    std::vector<at::Tensor> grads;
    for (size_t k : ks) grads.push_back(params[k].grad().reshape({-1}));
    // One tensor: its own (flat) gradient; several: one flat buffer, one exchange.
    const at::Tensor mine = grads.size() == 1 ? grads[0] : at::cat(grads);
    size_t own = 0;  // this holder's index among them
    std::vector<at::Tensor> parts = exchange_with_holders(mine, placed, tag++, own);
    // Sum in stage order. Into this holder's own part when that is the first or second (a + b is
    // b + a bitwise), else into a fresh buffer; then into each .grad in place (a bucket's view).
    const size_t first = own <= 1 ? own : 0;
    at::Tensor sum = own <= 1 ? parts[own] : parts[0].clone();
    for (size_t j = 0; j < parts.size(); ++j)
      if (j != first) sum.add_(parts[j]);
    int64_t offset = 0;
    for (size_t i = 0; i < ks.size(); ++i) {
      at::Tensor& grad = params[ks[i]].mutable_grad();
      const at::Tensor part = sum.narrow(0, offset, grad.numel()).view_as(grad);
      if (part.data_ptr() != grad.data_ptr()) grad.copy_(part);
      offset += grad.numel();
    }
  }
}

std::vector<at::Tensor> GradientSync::exchange_with_holders(const at::Tensor& mine, const Placement& placed, int tag,
                                                           size_t& own_index) {
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
      own_index = parts.size();
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
