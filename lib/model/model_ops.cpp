// ModelOps::dense_concat's default: each projection's product, then one cat.
#include "model/model_ops.h"

namespace spmd {

at::Tensor ModelOps::dense_concat(const at::Tensor& x, const std::vector<std::string>& weights,
                                  int64_t contracted_dims) {
  std::vector<at::Tensor> outputs;
  for (const std::string& w : weights) outputs.push_back(dense(x, w, "", contracted_dims));
  return at::cat(outputs, x.dim() - contracted_dims);
}

}  // namespace spmd
