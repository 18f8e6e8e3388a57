// The one place a c10d backend is built: Gloo (CPU or CUDA tensors) or NCCL (CUDA builds).
#pragma once
#include <chrono>
#include <string>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>  // completes c10d::Backend


namespace c10d {
class Store;
}

namespace spmd {

// A backend of `kind` ("gloo" | "nccl") for `size` ranks meeting through `store` (a PrefixStore
// unique to the group), every operation bounded by `timeout`. Gloo binds to `gloo_address`, or,
// when empty, to GLOO_SOCKET_IFNAME's interface or this host's name.
c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& kind, const c10::intrusive_ptr<c10d::Store>& store,
                                                     int rank, int size, std::chrono::milliseconds timeout,
                                                     const std::string& gloo_address);

}  // namespace spmd
