// Reduced-precision copies of parameters (bf16 matmul operands, model.matmul_dtype), made once per
// optimizer update rather than at every use: every microbatch of a step, and each use of a tied
// weight, shares one copy. The copy is autograd's cast of the float32 master parameter, so the
// gradients of all its uses land, in float32, in the parameter's .grad.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace spmd {

class ParamCastCache {
 public:
  // `param` (slot i of the model's parameters) in `dtype`. Reused while the parameter's version
  // (bumped by every in-place update: the optimizer's step, a checkpoint load) and the grad mode
  // are those it was made under: a copy made under no_grad carries no gradient back.
  at::Tensor get(size_t i, const at::Tensor& param, at::ScalarType dtype);

 private:
  struct Entry {
    at::Tensor copy;
    const void* source = nullptr;  // the parameter it was cast from (a slot may get a new tensor)
    int64_t version = 0;
    bool with_grad = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace spmd
