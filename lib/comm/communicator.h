// Rendezvous (c10d TCPStore) and the process groups of a mesh: the world and every line of
// every combination of axes the run needs, all created up front, over the run's backend (Gloo or
// NCCL), plus a Gloo world group on the CPU for control messages that must not touch the GPU.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "comm/backend.h"
#include "comm/group.h"
#include "comm/launch_env.h"
#include "mesh/mesh.h"

namespace c10d {
class Store;
}

namespace spmd {

struct ConnectedStore;  // comm/rendezvous_store.h

// This process's place (rank, world, where rank 0 serves the store) and how to connect.
struct RendezvousInfo : LaunchRanks {
  double timeout_s = 300;
  std::shared_ptr<ConnectedStore> store;  // connected early (the pre-launch verdict); null: connect here
};

// Where a launcher (ours, torchrun, srun, mpirun: comm/launch_env.h) placed this process.
inline RendezvousInfo rendezvous_info(const LaunchRanks& l, double timeout_s) { return {l, timeout_s, nullptr}; }

class Communicator {
 public:
  // Connects to the store (rank 0 hosts it), picks the rank's device and builds the world group
  // over runtime.backend. Errors are RuntimeError with the address and what went wrong.
  Communicator(const RendezvousInfo& info, const Mesh& mesh, const ResolvedRuntime& runtime = {});
  // A single-process communicator: every group is a group of one.
  explicit Communicator(const Mesh& mesh, const ResolvedRuntime& runtime = {});
  ~Communicator();

  int rank() const { return rank_; }
  const Mesh& mesh() const { return mesh_; }
  // Where this rank's tensors live (cpu, or cuda:LOCAL_RANK).
  c10::Device device() const { return device_; }
  const ResolvedRuntime& runtime() const { return runtime_; }
  // The rendezvous store (null in a single-process run): for coordination that must not go
  // through a process group (the background checkpoint commit).
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }
  // Every rank, over the run's backend: tensors on device().
  const Group& world() const { return world_; }
  // Every rank over Gloo with CPU tensors (stop votes, checkpoint agreement, memory reports):
  // using it never waits on the GPU. The world group itself when the backend is Gloo.
  const Group& control() const { return runtime_.backend == "gloo" ? world_ : control_; }
  // Creates the groups along `axes` (ordered: first axis major) for this rank. Every rank must
  // call it with the same axes in the same order.
  void create_group(const std::vector<std::string>& axes);
  // The group along `axes`; it must have been created.
  const Group& along(const std::vector<std::string>& axes) const;
  // The same lines over Gloo with CPU tensors (the groups along() gives, when the backend is
  // Gloo): for point-to-point traffic whose order NCCL's streams would not match.
  void create_host_group(const std::vector<std::string>& axes);
  const Group& host_along(const std::vector<std::string>& axes) const;
  // The same lines over the run's backend as process groups of their own: for collectives issued
  // while another collective on the same ranks may be in flight in an order that is not every
  // rank's (expert parallelism's exchanges inside backward, beside the gradient buckets' async
  // all-reduces): a process group matches its collectives by issue order.
  void create_exchange_group(const std::vector<std::string>& axes);
  const Group& exchange_along(const std::vector<std::string>& axes) const;

 private:
  void add_group(const std::vector<std::string>& axes, const std::string& backend, std::map<std::string, Group>& groups);

  Mesh mesh_;
  ResolvedRuntime runtime_;
  c10::Device device_{c10::kCPU};
  int rank_ = 0;
  std::chrono::milliseconds timeout_{0};
  std::string address_;  // Gloo's bind address; empty: chosen per host (see make_backend)
  c10::intrusive_ptr<c10d::Store> store_;
  Group world_;
  Group control_;  // unused (a group of one) when the backend is Gloo
  std::map<std::string, Group> groups_;
  std::map<std::string, Group> host_groups_;  // unused when the backend is Gloo
  std::map<std::string, Group> exchange_groups_;
};

}  // namespace spmd
