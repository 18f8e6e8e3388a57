// A group of ranks along some mesh axes, with the few collectives the trainer needs, over any
// c10d backend (Gloo or NCCL; tensors on the rank's device). A default-constructed Group is a
// group of one: every collective returns its input unchanged.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Backend;
class Work;
}  // namespace c10d

namespace spmd {

// Wall time this process has spent inside collectives (all groups), for step-time breakdowns.
int64_t collective_time_ns();

// Collectives this process has started (all groups of more than one member), by kind: facts for
// summary.json (how many a step issues), read as differences.
struct CollectiveCounts {
  int64_t all_reduces = 0, all_gathers = 0, reduce_scatters = 0, broadcasts = 0, sends = 0, receives = 0,
          all_to_alls = 0;
};
CollectiveCounts collective_counts();

// A collective started by Group::*_async; wait() finishes it (errors as the blocking calls).
class PendingCollective {
 public:
  PendingCollective();  // nothing pending
  ~PendingCollective();  // out of line: c10d::Work is incomplete here
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;
  void wait();

 private:
  friend class Group;
  const class Group* group_ = nullptr;
  const char* what_ = "";
  c10::intrusive_ptr<c10d::Work> work_;
  at::Tensor keep_alive_;  // a send's buffer
};

class Group;

// An all-gather started by Group::all_gather_async; wait() gives the concatenation.
class PendingGather {
 public:
  at::Tensor wait();

 private:
  friend class Group;
  PendingCollective work_;
  at::Tensor flat_;  // every member's tensor one after another along dim 0, filled in by the collective
  int64_t members_ = 1;  // 1: flat_ is the tensor itself (a group of one)
  int64_t dim_ = 0;
};

// A group as an integer, for autograd nodes' saved_data (which holds IValues, not pointers). The
// groups belong to the Communicator and outlive every graph.
inline int64_t group_handle(const Group& group) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(&group)); }
inline const Group& group_from_handle(int64_t handle) { return *reinterpret_cast<const Group*>(static_cast<intptr_t>(handle)); }

class Group {
 public:
  Group() = default;
  // `kind` is the backend's name ("gloo" | "nccl"): NCCL's waits leave the host free.
  Group(c10::intrusive_ptr<c10d::Backend> backend, std::string kind, int rank, int size, std::string name,
        std::chrono::milliseconds timeout);
  ~Group();
  Group(const Group&);
  Group& operator=(const Group&);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }

  void all_reduce_sum(at::Tensor& tensor) const;  // in place
  void all_reduce_max(at::Tensor& tensor) const;  // in place
  // Starts an in-place sum; `tensor` must be left alone until the returned wait().
  PendingCollective all_reduce_sum_async(at::Tensor& tensor) const;
  // Concatenation of every member's `tensor` along `dim`, in member order.
  at::Tensor all_gather(const at::Tensor& tensor, int64_t dim) const;
  PendingGather all_gather_async(const at::Tensor& tensor, int64_t dim) const;
  // Sum over members, then this member's chunk along `dim`.
  at::Tensor reduce_scatter_sum(const at::Tensor& tensor, int64_t dim) const;
  // Rows of `input` (contiguous, dim 0) in member order, send_counts[j] of them to member j;
  // returns the rows received, receive_counts[j] from member j, in member order.
  at::Tensor all_to_all_rows(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& receive_counts) const;
  void broadcast(at::Tensor& tensor, int root) const;
  void barrier() const;
  // Point to point with member `peer` (its rank in this group); a send and a receive match by
  // `tag`. The send's tensor is kept (and must stay unchanged) until its wait(); the receive
  // blocks, bounded by the group's timeout, and fills a contiguous tensor of the sent shape.
  PendingCollective send_async(const at::Tensor& tensor, int peer, int tag) const;
  void receive(at::Tensor& tensor, int peer, int tag) const;
  // A receive into `tensor` (contiguous, the sent shape) that completes at the returned wait().
  PendingCollective receive_async(at::Tensor& tensor, int peer, int tag) const;
  // Tears the backend down before exit (NCCL wants it; a no-op for Gloo and groups of one):
  // gracefully, or aborting in-flight work when `abort` (an error is unwinding; a peer may be gone).
  void close(bool abort) const;

 private:
  friend class PendingCollective;
  void wait(const char* what, c10::intrusive_ptr<c10d::Work> work) const;

  c10::intrusive_ptr<c10d::Backend> backend_;
  std::string kind_ = "self";
  int rank_ = 0;
  int size_ = 1;
  std::string name_ = "self";
  std::chrono::milliseconds timeout_{0};
};

}  // namespace spmd
