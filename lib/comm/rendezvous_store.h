// The run's rendezvous store (a c10d TCPStore hosted by rank 0), connected once: early, for the
// pre-launch verdict of externally launched ranks, and reused by the Communicator.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "comm/communicator.h"

namespace c10d {
class Store;
}

namespace spmd {

struct ConnectedStore {
  c10::intrusive_ptr<c10d::Store> store;
};

// Connects to (rank 0: hosts) the store; waits for all ranks. RuntimeError names the address.
std::shared_ptr<ConnectedStore> connect_store(const RendezvousInfo& info);

// Rank 0 sets `key` to `value`; every rank returns it (others wait up to the store's timeout).
// Rank 0 returns only after every other rank has read it, so it may exit right after.
std::string share_from_rank_zero(ConnectedStore& connected, const RendezvousInfo& info, const std::string& key,
                                 const std::string& value);

}  // namespace spmd
