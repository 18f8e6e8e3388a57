// TCPStore connection and a rank-0-to-all string broadcast over it.
#include "comm/rendezvous_store.h"

#include <thread>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "util/error.h"
#include "util/exception_text.h"

namespace spmd {

std::shared_ptr<ConnectedStore> connect_store(const RendezvousInfo& info) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(info.master_port);
  options.isServer = info.rank == 0;
  options.numWorkers = info.world_size;
  options.waitWorkers = true;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(info.timeout_s * 1000));
  try {
    return std::make_shared<ConnectedStore>(
        ConnectedStore{c10::make_intrusive<c10d::TCPStore>(info.master_addr, options)});
  } catch (const std::exception& e) {
    const std::string text = exception_text(e);
    const std::string hint = text.find("EADDRINUSE") == std::string::npos
                                 ? ""
                                 : fmt::format(" (port {} is taken on this host: pass a free one, as MASTER_PORT or --master-port)",
                                               info.master_port);
    throw RuntimeError(fmt::format("rendezvous with {}:{} failed for rank {} (timeout {:.0f} s){}: {}",
                                   info.master_addr, info.master_port, info.rank, info.timeout_s, hint, text));
  }
}

std::string share_from_rank_zero(ConnectedStore& connected, const RendezvousInfo& info, const std::string& key,
                                 const std::string& value) {
  c10d::Store& store = *connected.store;
  const std::string read_count = key + "/read";
  try {
    if (info.rank != 0) {
      const auto bytes = store.get(key);  // waits up to the store's timeout
      store.add(read_count, 1);
      return std::string(bytes.begin(), bytes.end());
    }
    store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
    // The store dies with rank 0: wait (bounded) until every peer has its copy.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(info.timeout_s * 1000));
    while (store.add(read_count, 0) < info.world_size - 1 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return value;
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format("rank {}: waiting for rank 0's '{}' in the rendezvous store failed within "
                                   "runtime.timeout_s = {:.0f} s: {}",
                                   info.rank, key, info.timeout_s, exception_text(e)));
  }
}

}  // namespace spmd
