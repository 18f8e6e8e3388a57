// TCPStore rendezvous and one backend per mesh line (a PrefixStore per line, ranks renumbered).
#include "comm/communicator.h"

#include <cstdlib>
#include <exception>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "comm/backend_factory.h"
#include "comm/rendezvous_store.h"
#include "util/error.h"
#include "util/exception_text.h"

namespace spmd {

namespace {
std::string axes_key(const std::vector<std::string>& axes) { return fmt::format("{}", fmt::join(axes, ",")); }

// Every rank's gpu_identity, through the store (each rank may have been given its own
// CUDA_VISIBLE_DEVICES, so indices alone cannot tell whether two ranks share a GPU).
std::vector<std::string> exchange_gpu_ids(c10d::Store& store, c10::Device device, int rank, int world_size) {
  const std::string mine = gpu_identity(device);
  store.set(fmt::format("gpu_id/{}", rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> ids;
  for (int r = 0; r < world_size; ++r) {
    const std::vector<uint8_t> id = store.get(fmt::format("gpu_id/{}", r));  // waits, bounded by the store's timeout
    ids.emplace_back(id.begin(), id.end());
  }
  return ids;
}
}  // namespace

Communicator::Communicator(const Mesh& mesh, const ResolvedRuntime& runtime)
    : mesh_(mesh), runtime_(runtime), device_(rank_device(runtime, 0)) {
  SPMD_CHECK(mesh.size() == 1, "a single-process run needs a mesh of size 1, but {} has {} devices",
             mesh.describe(), mesh.size());
}

Communicator::Communicator(const RendezvousInfo& info, const Mesh& mesh, const ResolvedRuntime& runtime)
    : mesh_(mesh), runtime_(runtime), device_(rank_device(runtime, info.local_rank)), rank_(info.rank),
      timeout_(std::chrono::milliseconds(static_cast<int64_t>(info.timeout_s * 1000))) {
  SPMD_CHECK(info.world_size == mesh.size(),
             "the world has {} processes but mesh {} has {} devices; set --nproc or mesh.shape so they match",
             info.world_size, mesh.describe(), mesh.size());
  store_ = (info.store ? info.store : connect_store(info))->store;
  if (runtime_.device == "cuda")  // before any NCCL group: two ranks on one GPU would hang it
    runtime_ = settle_backend_for_gpus(runtime_, exchange_gpu_ids(*store_, device_, rank_, info.world_size));
  // Gloo binds to an address its peers can reach: loopback when every rank is on this host,
  // otherwise this host's own interface (an empty address_ lets make_backend choose it).
  address_ = info.local_world_size == info.world_size ? "127.0.0.1" : "";
  try {
    auto prefix = c10::make_intrusive<c10d::PrefixStore>("world", store_);
    world_ = Group(make_backend(runtime_.backend, prefix, info.rank, info.world_size, timeout_, address_),
                   runtime_.backend, info.rank, info.world_size, "world", timeout_);
    if (runtime_.backend != "gloo") {
      auto control_prefix = c10::make_intrusive<c10d::PrefixStore>("control", store_);
      control_ = Group(make_backend("gloo", control_prefix, info.rank, info.world_size, timeout_, address_), "gloo",
                       info.rank, info.world_size, "control", timeout_);
    }
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("creating the world process group failed on rank {} within runtime.timeout_s = "
                                   "{:.0f} s: {} (did every one of the {} ranks start?)",
                                   info.rank, info.timeout_s, exception_text(e), info.world_size));
  }
}

Communicator::~Communicator() {
  // NCCL's communicators are torn down before exit (ProcessGroupNCCL warns otherwise):
  // gracefully on a normal exit, aborted while an error unwinds (a peer may be gone).
  const bool unwinding = std::uncaught_exceptions() > 0;
  for (const auto& entry : groups_) entry.second.close(unwinding);
  world_.close(unwinding);
}

void Communicator::create_group(const std::vector<std::string>& axes) { add_group(axes, runtime_.backend, groups_); }

void Communicator::create_host_group(const std::vector<std::string>& axes) {
  if (runtime_.backend == "gloo") create_group(axes);
  else add_group(axes, "gloo", host_groups_);
}

void Communicator::create_exchange_group(const std::vector<std::string>& axes) {
  add_group(axes, runtime_.backend, exchange_groups_);
}

void Communicator::add_group(const std::vector<std::string>& axes, const std::string& backend,
                             std::map<std::string, Group>& groups) {
  std::string key = axes_key(axes);
  if (groups.count(key)) return;
  auto members = mesh_.group_ranks(rank_, axes);
  int size = static_cast<int>(members.size());
  int index = static_cast<int>(mesh_.index_along(rank_, axes));
  const char* kind = &groups == &host_groups_ ? "host:" : &groups == &exchange_groups_ ? "exchange:" : "";
  std::string name = fmt::format("{}{}[{}]", kind, key.empty() ? "self" : key,
                                 fmt::join(members, ","));
  if (size == 1 || !store_) {
    groups[key] = Group();
    return;
  }
  try {
    auto prefix = c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_);
    groups[key] = Group(make_backend(backend, prefix, index, size, timeout_, address_), backend, index, size, name,
                        timeout_);
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("creating process group {} failed on rank {}: {}", name, rank_, exception_text(e)));
  }
}

const Group& Communicator::along(const std::vector<std::string>& axes) const {
  auto it = groups_.find(axes_key(axes));
  SPMD_ASSERT(it != groups_.end(), "process group along ({}) was not created", axes_key(axes));
  return it->second;
}

const Group& Communicator::host_along(const std::vector<std::string>& axes) const {
  if (runtime_.backend == "gloo") return along(axes);
  auto it = host_groups_.find(axes_key(axes));
  SPMD_ASSERT(it != host_groups_.end(), "host process group along ({}) was not created", axes_key(axes));
  return it->second;
}

const Group& Communicator::exchange_along(const std::vector<std::string>& axes) const {
  auto it = exchange_groups_.find(axes_key(axes));
  SPMD_ASSERT(it != exchange_groups_.end(), "exchange process group along ({}) was not created", axes_key(axes));
  return it->second;
}

}  // namespace spmd
