// Collectives over one c10d backend; a group of one short-circuits every call.
#include "comm/group.h"

#include <atomic>
#include <chrono>

#include <fmt/format.h>

#include "util/error.h"
#include "util/exception_text.h"
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>  // the backend base and its options, in 1.13 and 2.x

namespace spmd {

namespace {
std::atomic<int64_t> g_collective_ns{0};
}

int64_t collective_time_ns() { return g_collective_ns.load(); }

Group::Group(c10::intrusive_ptr<compat::BackendBase> backend, std::string kind, int rank, int size, std::string name,
             std::chrono::milliseconds timeout)
    : backend_(std::move(backend)), kind_(std::move(kind)), rank_(rank), size_(size), name_(std::move(name)), timeout_(timeout) {}
Group::~Group() = default;
Group::Group(const Group&) = default;
Group& Group::operator=(const Group&) = default;

void Group::wait(const char* what, c10::intrusive_ptr<c10d::Work> work) const {
  auto start = std::chrono::steady_clock::now();
  try {
    work->wait(timeout_);
    g_collective_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  } catch (const std::exception& e) {
    // A backend reports a dead peer as a connection error or a timeout: say which group and why.
    throw RuntimeError(fmt::format("{} over group '{}' ({} ranks) failed: {}; a peer process has probably "
                                   "died or stopped responding",
                                   what, name_, size_, exception_text(e)));
  }
}

void Group::all_reduce_sum(at::Tensor& tensor) const {
  if (size_ == 1) return;
  std::vector<at::Tensor> tensors{tensor};
  wait("all-reduce", backend_->allreduce(tensors, c10d::AllreduceOptions{}));
}

PendingCollective Group::all_reduce_sum_async(at::Tensor& tensor) const {
  PendingCollective pending;
  if (size_ == 1) return pending;
  std::vector<at::Tensor> tensors{tensor};
  pending.group_ = this;
  pending.what_ = "all-reduce";
  pending.work_ = backend_->allreduce(tensors, c10d::AllreduceOptions{});
  return pending;
}

PendingCollective::PendingCollective() = default;
PendingCollective::~PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&&) noexcept = default;

void PendingCollective::wait() {
  if (!work_) return;
  auto work = std::move(work_);
  work_ = {};
  group_->wait(what_, std::move(work));
  keep_alive_ = at::Tensor();
}

void Group::all_reduce_max(at::Tensor& tensor) const {
  if (size_ == 1) return;
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  wait("all-reduce", backend_->allreduce(tensors, options));
}

at::Tensor Group::all_gather(const at::Tensor& tensor, int64_t dim) const { return all_gather_async(tensor, dim).wait(); }

PendingGather Group::all_gather_async(const at::Tensor& tensor, int64_t dim) const {
  PendingGather pending;
  pending.dim_ = dim;
  if (size_ == 1) {
    pending.parts_ = {tensor};
    return pending;
  }
  std::vector<at::Tensor> inputs{tensor.contiguous()};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int i = 0; i < size_; ++i) outputs[0].push_back(at::empty_like(inputs[0]));
  pending.parts_ = outputs[0];  // the same tensors: Gloo writes into them
  pending.work_.group_ = this;
  pending.work_.what_ = "all-gather";
  pending.work_.work_ = backend_->allgather(outputs, inputs);
  return pending;
}

at::Tensor PendingGather::wait() {
  work_.wait();
  at::Tensor result = parts_.size() == 1 ? parts_[0] : at::cat(parts_, dim_);
  parts_.clear();
  return result;
}

at::Tensor Group::reduce_scatter_sum(const at::Tensor& tensor, int64_t dim) const {
  if (size_ == 1) return tensor;
  if (kind_ == "nccl") {
    std::vector<at::Tensor> chunks = tensor.contiguous().chunk(size_, dim);
    std::vector<std::vector<at::Tensor>> inputs(1);
    for (auto& c : chunks) inputs[0].push_back(c.contiguous());
    std::vector<at::Tensor> outputs{at::empty_like(inputs[0][static_cast<size_t>(rank_)])};
    wait("reduce-scatter", backend_->reduce_scatter(outputs, inputs, c10d::ReduceScatterOptions{}));
    return outputs[0];
  }
  // Gloo in libtorch 1.13 has no reduce-scatter: all-reduce, then keep our chunk.
  at::Tensor sum = tensor.contiguous().clone();
  all_reduce_sum(sum);
  return sum.chunk(size_, dim)[rank_].contiguous();
}

void Group::broadcast(at::Tensor& tensor, int root) const {
  if (size_ == 1) return;
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  wait("broadcast", backend_->broadcast(tensors, options));
}

PendingCollective Group::send_async(const at::Tensor& tensor, int peer, int tag) const {
  SPMD_ASSERT(peer != rank_ && peer >= 0 && peer < size_, "send to member {} of group '{}' ({} ranks) from {}", peer,
              name_, size_, rank_);
  PendingCollective pending;
  pending.keep_alive_ = tensor.contiguous();
  std::vector<at::Tensor> tensors{pending.keep_alive_};
  pending.group_ = this;
  pending.what_ = "send";
  pending.work_ = backend_->send(tensors, peer, tag);
  return pending;
}

void Group::receive(at::Tensor& tensor, int peer, int tag) const {
  SPMD_ASSERT(peer != rank_ && peer >= 0 && peer < size_ && tensor.is_contiguous(),
              "receive from member {} of group '{}' ({} ranks) at {}", peer, name_, size_, rank_);
  std::vector<at::Tensor> tensors{tensor};
  wait("receive", backend_->recv(tensors, peer, tag));
}

void Group::barrier() const {
  if (size_ == 1) return;
  wait("barrier", backend_->barrier());
}

}  // namespace spmd
