// AdamW on local shards: its state takes each parameter's sharding, so it shrinks with the mesh.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "config/config.h"

namespace spmd {

class AdamW {
 public:
  // `decay[i]` says whether parameter i gets weight decay (matrices only, as nanoGPT). Undefined
  // parameters (other pipeline stages') are skipped.
  AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, const TrainConfig& config);

  // One update with learning rate `lr`; gradients already synchronized. Each gradient is used
  // multiplied by `grad_scale` (the clipping factor; the gradients themselves are not changed).
  void step(double lr, double grad_scale = 1.0);

  // The same update decided on the device, for devices whose numbers are read lazily (CUDA):
  // `grad_scale` and `apply` are 0-dim tensors there (float64, bool). Where `apply` is false the
  // parameters, moments and step count stay as they were. No host synchronization. libtorch's
  // fused AdamW (at::_fused_adamw_); the gradients are left multiplied by `grad_scale`.
  void step_on_device(double lr, const at::Tensor& grad_scale, const at::Tensor& apply);

  // Updates applied so far (the bias correction's t); reads the device counter if one is kept.
  int64_t steps_taken() const;
  void set_steps_taken(int64_t steps);
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  int64_t state_bytes() const;

 private:
  std::vector<at::Tensor> params_;
  std::vector<bool> decay_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  double beta1_, beta2_, eps_ = 1e-8, weight_decay_;
  int64_t steps_ = 0;
  at::Tensor device_steps_;  // step_on_device's t (0-dim float32, as the fused kernel reads it); undefined until it is used
};

}  // namespace spmd
