// Collectives over one c10d backend; a group of one short-circuits every call.
#include "comm/group.h"

#include <atomic>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"
#include "util/exception_text.h"
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>  // the backend base and its options

namespace spmd {

namespace {
std::atomic<int64_t> g_collective_ns{0};
std::atomic<int64_t> g_all_reduces{0}, g_all_gathers{0}, g_reduce_scatters{0}, g_broadcasts{0}, g_sends{0}, g_receives{0},
    g_all_to_alls{0};
}  // namespace

int64_t collective_time_ns() { return g_collective_ns.load(); }

CollectiveCounts collective_counts() {
  return {g_all_reduces.load(), g_all_gathers.load(), g_reduce_scatters.load(), g_broadcasts.load(),
          g_sends.load(),       g_receives.load(),    g_all_to_alls.load()};
}

Group::Group(c10::intrusive_ptr<c10d::Backend> backend, std::string kind, int rank, int size, std::string name,
             std::chrono::milliseconds timeout)
    : backend_(std::move(backend)), kind_(std::move(kind)), rank_(rank), size_(size), name_(std::move(name)), timeout_(timeout) {}
Group::~Group() = default;
Group::Group(const Group&) = default;
Group& Group::operator=(const Group&) = default;

void Group::wait(const char* what, c10::intrusive_ptr<c10d::Work> work) const {
  auto start = std::chrono::steady_clock::now();
  try {
    // Gloo: the host waits for the result, bounded by the group's timeout. NCCL: wait() without
    // a timeout only orders the current stream after the collective and returns at once, so
    // communication overlaps compute; a hung collective is bounded by the process group's own
    // timeout, whose watchdog tears the process down (comm/backend_factory.cpp). Here collective_ns
    // then counts the host's share only.
    if (kind_ == "nccl") work->wait();
    else work->wait(timeout_);
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
  ++g_all_reduces;
  std::vector<at::Tensor> tensors{tensor};
  wait("all-reduce", backend_->allreduce(tensors, c10d::AllreduceOptions{}));
}

PendingCollective Group::all_reduce_sum_async(at::Tensor& tensor) const {
  PendingCollective pending;
  if (size_ == 1) return pending;
  ++g_all_reduces;
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
  ++g_all_reduces;
  wait("all-reduce", backend_->allreduce(tensors, options));
}

at::Tensor Group::all_gather(const at::Tensor& tensor, int64_t dim) const { return all_gather_async(tensor, dim).wait(); }

PendingGather Group::all_gather_async(const at::Tensor& tensor, int64_t dim) const {
  PendingGather pending;
  pending.dim_ = dim < 0 ? dim + tensor.dim() : dim;
  if (size_ == 1) {
    pending.flat_ = tensor;
    return pending;
  }
  pending.members_ = size_;
  ++g_all_gathers;
  // One flat buffer (the backend's native all-gather, NCCL's and Gloo's alike): no per-member
  // tensors to allocate and concatenate.
  at::Tensor input = tensor.contiguous();
  std::vector<int64_t> shape = input.sizes().vec();
  SPMD_ASSERT(!shape.empty(), "all-gather of a 0-dim tensor over group '{}'", name_);
  shape[0] *= size_;
  pending.flat_ = at::empty(shape, input.options());  // the members' tensors one after another along dim 0
  pending.work_.group_ = this;
  pending.work_.what_ = "all-gather";
  pending.work_.work_ = backend_->_allgather_base(pending.flat_, input);
  return pending;
}

at::Tensor PendingGather::wait() {
  work_.wait();
  at::Tensor stacked = std::move(flat_);
  flat_ = at::Tensor();
  if (members_ == 1 || dim_ == 0) return stacked;
  // (members * d0, ...) -> (members, d0, ...) -> the members' blocks side by side along dim_.
  std::vector<int64_t> per_member = stacked.sizes().vec();
  per_member[0] /= members_;
  per_member.insert(per_member.begin(), members_);
  return stacked.view(per_member).movedim(0, dim_).flatten(dim_, dim_ + 1);
}

at::Tensor Group::all_to_all_rows(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                  const std::vector<int64_t>& receive_counts) const {
  SPMD_ASSERT(static_cast<int>(send_counts.size()) == size_ && static_cast<int>(receive_counts.size()) == size_,
              "all-to-all over group '{}' ({} ranks) with {} send and {} receive counts", name_, size_,
              send_counts.size(), receive_counts.size());
  if (size_ == 1) return input;
  int64_t rows = 0;
  for (int64_t c : receive_counts) rows += c;
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = rows;
  const at::Tensor in = input.contiguous();
  at::Tensor output = at::empty(shape, in.options());
  // The backends take the splits in rows of dim 0.
  std::vector<int64_t> out_splits = receive_counts, in_splits = send_counts;
  ++g_all_to_alls;
  wait("all-to-all", backend_->alltoall_base(output, const_cast<at::Tensor&>(in), out_splits, in_splits,
                                             c10d::AllToAllOptions{}));
  return output;
}

at::Tensor Group::reduce_scatter_sum(const at::Tensor& tensor, int64_t dim) const {
  if (size_ == 1) return tensor;
  if (dim < 0) dim += tensor.dim();
  SPMD_ASSERT(tensor.size(dim) % size_ == 0, "reduce-scatter of {} along dim {} over group '{}' ({} ranks)",
              tensor.sizes().vec(), dim, name_, size_);
  // One flat buffer holding the members' chunks in member order: the backend's native reduce-scatter.
  std::vector<int64_t> split = tensor.sizes().vec();
  split[static_cast<size_t>(dim)] /= size_;
  split.insert(split.begin() + dim, size_);  // (..., members, chunk, ...)
  const at::Tensor chunks = tensor.reshape(split).movedim(dim, 0).contiguous();  // (members, chunk's shape)
  at::Tensor output = at::empty(chunks.sizes().slice(1), chunks.options());
  at::Tensor input = chunks.flatten(0, 1);  // the chunks one after another along dim 0, as the backends take them
  ++g_reduce_scatters;
  wait("reduce-scatter", backend_->_reduce_scatter_base(output, input, c10d::ReduceScatterOptions{}));
  return output;
}

void Group::broadcast(at::Tensor& tensor, int root) const {
  if (size_ == 1) return;
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  ++g_broadcasts;
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
  ++g_sends;
  pending.work_ = backend_->send(tensors, peer, tag);
  return pending;
}

void Group::receive(at::Tensor& tensor, int peer, int tag) const {
  SPMD_ASSERT(peer != rank_ && peer >= 0 && peer < size_ && tensor.is_contiguous(),
              "receive from member {} of group '{}' ({} ranks) at {}", peer, name_, size_, rank_);
  ++g_receives;
  std::vector<at::Tensor> tensors{tensor};
  wait("receive", backend_->recv(tensors, peer, tag));
}

PendingCollective Group::receive_async(at::Tensor& tensor, int peer, int tag) const {
  SPMD_ASSERT(peer != rank_ && peer >= 0 && peer < size_ && tensor.is_contiguous(),
              "receive from member {} of group '{}' ({} ranks) at {}", peer, name_, size_, rank_);
  PendingCollective pending;
  pending.keep_alive_ = tensor;
  std::vector<at::Tensor> tensors{tensor};
  pending.group_ = this;
  pending.what_ = "receive";
  ++g_receives;
  pending.work_ = backend_->recv(tensors, peer, tag);
  return pending;
}

void Group::barrier() const {
  if (size_ == 1) return;
  wait("barrier", backend_->barrier());
}

void Group::close(bool abort) const {
  if (!backend_ || kind_ != "nccl") return;
  if (abort) backend_->abort();
  else backend_->shutdown();
}

}  // namespace spmd
