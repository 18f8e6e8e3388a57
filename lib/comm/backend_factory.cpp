// make_backend: Gloo everywhere, NCCL from the CUDA module where the build has it.
#include "comm/backend_factory.h"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "kernels/cuda_module.h"
#include "util/error.h"

namespace spmd {

namespace {
c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  std::chrono::milliseconds timeout, const std::string& address) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
  if (!address.empty()) options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  else if (interface && *interface) options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  else options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}
}  // namespace

c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& kind, const c10::intrusive_ptr<c10d::Store>& store,
                                                     int rank, int size, std::chrono::milliseconds timeout,
                                                     const std::string& gloo_address) {
  if (kind == "gloo") return make_gloo(store, rank, size, timeout, gloo_address);
  if (kind == "nccl" && cuda::built()) return cuda::module().make_nccl(store, rank, size, timeout);
  throw RuntimeError("make_backend: backend '" + kind + "' is not available in this build");
}

}  // namespace spmd
