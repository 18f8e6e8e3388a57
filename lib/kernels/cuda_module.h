// The CUDA half of a CUDA build, loaded only where a GPU can be: libspmd_cuda.so (kernels/cuda/)
// links libtorch_cuda, cudart and NCCL, so that a process on a host without a GPU device node maps
// none of them. Loading libtorch_cuda and its CUDA libraries costs a process ~0.25 s of CPU and
// ~37k page faults (bench/start_time.sh); a CPU run of 8 ranks paid it 8 times over.
//
// Where a GPU device node exists (/dev/nvidiactl, /dev/nvidia0, WSL's /dev/dxg) the module is
// loaded as the program starts, before any libtorch call can ask for CUDA (libtorch keeps its
// first answer): there a process behaves as if it were linked against CUDA. Elsewhere nothing is
// loaded and the GPU count is 0 without asking the driver.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include <ATen/ATen.h>
#include <c10/util/intrusive_ptr.h>

#include "kernels/counter_hash.h"

namespace c10d {
class Backend;
class Store;
}  // namespace c10d

namespace spmd::cuda {

// What the module provides, one function each (kernels/cuda/module_entry.cpp).
struct Module {
  int (*device_count)();  // 0, not an error, with no driver or GPU
  void (*set_device)(int index);
  void (*synchronize)(int index);
  std::string (*device_name)(int index);  // "" where the driver cannot say
  std::string (*pci_bus_id)(int index);   // "" where the driver cannot say
  int64_t (*peak_allocated_bytes)(int index);
  c10::intrusive_ptr<c10d::Backend> (*make_nccl)(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                 std::chrono::milliseconds timeout);
  // counter_dropout_mask (kernels/cuda/counter_dropout.h) into `out` on its device.
  void (*counter_dropout_mask)(at::Tensor& out, const counter_hash::BlockIndex& block, uint64_t key, double p_scaled,
                               float keep_scale);
  // softmax_cross_entropy (kernels/cuda/softmax_cross_entropy.h): losses and, where defined, grad.
  void (*softmax_cross_entropy)(const at::Tensor& logits, const at::Tensor& targets, int64_t valid,
                                at::Tensor& losses, at::Tensor& grad);
  // residual_norm_forward / _backward (kernels/cuda/residual_norm.h).
  void (*residual_norm_forward)(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                const at::Tensor& bias, double eps, bool rms, at::Tensor& sum, at::Tensor& normed,
                                at::Tensor& mean, at::Tensor& rstd);
  void (*residual_norm_backward)(const at::Tensor& sum, const at::Tensor& weight, const at::Tensor& mean,
                                 const at::Tensor& rstd, const at::Tensor& d_normed, const at::Tensor& d_sum_in,
                                 bool rms, at::Tensor& d_sum, at::Tensor& d_delta, at::Tensor& d_weight,
                                 at::Tensor& d_bias);
  // rotary, swiglu_forward / _backward (kernels/cuda/pointwise.h).
  void (*rotary)(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, double sign, at::Tensor& out);
  void (*swiglu_forward)(const at::Tensor& gate, const at::Tensor& up, at::Tensor& out);
  void (*swiglu_backward)(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& d_out, at::Tensor& d_gate,
                          at::Tensor& d_up);
};

// Whether this build has the module (a CUDA build: SPMD_WITH_CUDA).
bool built();

// Whether this host has a GPU device node, so that CUDA may find a GPU.
bool gpu_device_node_present();

// Whether the module is loaded in this process (only ever after module() or at start, see above).
bool loaded();

// The module, loaded on first use. RuntimeError naming the file and the loader's error where it
// cannot be loaded, and in a build without it.
const Module& module();

}  // namespace spmd::cuda
