// Point-to-point transfers between neighbouring pipeline stages.
#include "parallel/stage_link.h"

#include <chrono>

#include <fmt/ranges.h>

#include "comm/host_copies.h"
#include "util/elapsed.h"
#include "util/error.h"

namespace spmd {

// Activations and gradients travel in opposite directions between a pair of stages (with chunks,
// between the same two ranks in both directions): distinct tags keep them apart.
int StageLink::activation_tag(int64_t microbatch, int64_t boundary) const {
  return static_cast<int>(2 * (microbatch * stages_ * chunks() + boundary));
}

StageLink::StageLink(const ModelLayout& layout, Communicator& comm) : layout_(layout), device_(comm.device()) {
  const auto& pipe = layout.pipeline;
  const auto axes = pipe.axis.empty() ? std::vector<std::string>{} : std::vector<std::string>{pipe.axis};
  comm.create_host_group(axes);
  line_ = &comm.along(axes);
  p2p_ = &comm.host_along(axes);
  stage_ = layout.stage_of(comm.rank());
  stages_ = pipe.stages();
}

std::vector<int64_t> StageLink::activation_shape(int64_t rows, int64_t seq) const {
  const auto& spec = layout_.activation_spec;
  const auto& mesh = layout_.mesh;
  return {rows, seq / mesh.axes_size(spec.axes_of(1)), layout_.model.n_embd / mesh.axes_size(spec.axes_of(2))};
}

void StageLink::send_activation(int64_t microbatch, int64_t chunk, const at::Tensor& x) {
  SPMD_ASSERT(!ends(chunk), "the last virtual stage sends no activations");
  activation_sends_[{microbatch, chunk}] =
      p2p_->send_async(to_p2p(x), next_stage(), activation_tag(microbatch, virtual_stage(chunk)));
}

at::Tensor StageLink::receive_activation(int64_t microbatch, int64_t chunk, at::IntArrayRef shape,
                                         const at::TensorOptions& options) {
  SPMD_ASSERT(!embeds(chunk), "the first virtual stage receives no activations");
  return receive(previous_stage(), activation_tag(microbatch, virtual_stage(chunk) - 1), shape, options);
}

void StageLink::send_gradient(int64_t microbatch, int64_t chunk, const at::Tensor& grad) {
  SPMD_ASSERT(!embeds(chunk), "the first virtual stage sends no gradients");
  gradient_sends_.push_back(
      p2p_->send_async(to_p2p(grad), previous_stage(), gradient_tag(microbatch, virtual_stage(chunk) - 1)));
}

at::Tensor StageLink::receive_gradient(int64_t microbatch, int64_t chunk, at::IntArrayRef shape,
                                       const at::TensorOptions& options) {
  SPMD_ASSERT(!ends(chunk), "the last virtual stage receives no gradients");
  at::Tensor grad = receive(next_stage(), gradient_tag(microbatch, virtual_stage(chunk)), shape, options);
  if (auto sent = activation_sends_.find({microbatch, chunk}); sent != activation_sends_.end()) {
    sent->second.wait();
    activation_sends_.erase(sent);
  }
  return grad;
}

void StageLink::post_receive_activation(int64_t microbatch, int64_t chunk, at::IntArrayRef shape) {
  SPMD_ASSERT(!embeds(chunk), "the first virtual stage receives no activations");
  post_receive(previous_stage(), activation_tag(microbatch, virtual_stage(chunk) - 1), shape);
}

void StageLink::post_receive_gradient(int64_t microbatch, int64_t chunk, at::IntArrayRef shape) {
  SPMD_ASSERT(!ends(chunk), "the last virtual stage receives no gradients");
  post_receive(next_stage(), gradient_tag(microbatch, virtual_stage(chunk)), shape);
}

void StageLink::post_receive(int peer, int tag, at::IntArrayRef shape) {
  at::Tensor buffer = host_buffer(shape, at::kFloat, device_);  // pinned on a GPU: the copy up is queued
  PendingCollective work = p2p_->receive_async(buffer, peer, tag);
  posted_[tag] = {buffer, std::move(work)};
}

at::Tensor StageLink::receive(int peer, int tag, at::IntArrayRef shape, const at::TensorOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  at::Tensor buffer;
  if (auto posted = posted_.find(tag); posted != posted_.end()) {
    SPMD_ASSERT(posted->second.buffer.sizes() == shape && posted->second.buffer.dtype() == options.dtype(),
                "receive of {} posted as {} (fp32)", shape.vec(), posted->second.buffer.sizes().vec());
    posted->second.work.wait();
    buffer = posted->second.buffer;
    posted_.erase(posted);
  } else {
    buffer = host_buffer(shape, options.dtype().toScalarType(), device_);
    p2p_->receive(buffer, peer, tag);
  }
  receive_wait_ms_ += ms_since(start);
  // From pinned memory the copy up is queued on the stream (the caching host allocator keeps the
  // buffer until it is done); on the CPU the buffer is the tensor.
  return buffer.to(device_, /*non_blocking=*/true);
}

at::Tensor StageLink::to_p2p(const at::Tensor& t) const {
  if (t.is_cpu()) return t;  // Gloo sends host memory as it is
  // Gloo reads the bytes on its own thread: the copy down (queued, pinned) must be done first.
  at::Tensor host = host_buffer(t.sizes(), t.scalar_type(), device_);
  QueuedCopies copy;
  copy.copy(host, t);
  copy.wait();
  return host;
}

void StageLink::finish_sends() {
  for (auto& [m, send] : activation_sends_) send.wait();
  for (auto& send : gradient_sends_) send.wait();
  activation_sends_.clear();
  gradient_sends_.clear();
}

at::Tensor StageLink::from_last_stage(const at::Tensor& value) const {
  at::Tensor v = (is_last() ? value : at::zeros_like(value)).reshape({-1}).clone();
  line_->all_reduce_sum(v);
  return v.reshape(value.sizes());
}

}  // namespace spmd
