// make_backend: Gloo everywhere, NCCL where the build has CUDA (SPMD_WITH_CUDA).
#include "comm/backend_factory.h"

#include <cstdlib>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "util/error.h"

#ifdef SPMD_WITH_CUDA
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL  // ProcessGroupNCCL.hpp declares nothing without it
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

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

#ifdef SPMD_WITH_CUDA
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;  // the watchdog tears the process down when a collective outlives it
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#endif
}  // namespace

c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& kind, const c10::intrusive_ptr<c10d::Store>& store,
                                                     int rank, int size, std::chrono::milliseconds timeout,
                                                     const std::string& gloo_address) {
  if (kind == "gloo") return make_gloo(store, rank, size, timeout, gloo_address);
#ifdef SPMD_WITH_CUDA
  if (kind == "nccl") return make_nccl(store, rank, size, timeout);
#endif
  throw RuntimeError("make_backend: backend '" + kind + "' is not available in this build");
}

}  // namespace spmd
