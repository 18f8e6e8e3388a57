// ParallelOps::dense_concat: projections that read one input (q, k, v; gate, up) as one product
// of the input with their weights side by side. On two CPU cores a wider product runs nearer the
// BLAS's peak than three narrow ones (bench/bench_products.cpp), and under tensor parallelism with
// sequence parallelism the input is gathered once, not once per projection.
#include <algorithm>

#include <fmt/ranges.h>

#include "kernels/kernels.h"
#include "parallel/parallel_ops.h"
#include "util/error.h"

namespace spmd {

at::Tensor ParallelOps::dense_concat(const at::Tensor& x, const std::vector<std::string>& weights,
                                     int64_t contracted_dims) {
  SPMD_ASSERT(!weights.empty(), "dense_concat: no weights");
  const std::vector<std::string> out_tp = layout_of(weights[0]).output_tp_axes();
  // One product where every weight takes the same input: held whole or split along its outputs
  // over the same axes, and none FSDP (an FSDP weight is gathered inside its own product's node).
  const bool one_product = std::all_of(weights.begin(), weights.end(), [&](const std::string& w) {
    const ParamLayout& l = layout_of(w);
    return !is_fsdp(w) && l.info.input_dims == contracted_dims && l.input_tp_axes().empty() &&
           l.output_tp_axes() == out_tp;
  });
  if (!one_product) return ModelOps::dense_concat(x, weights, contracted_dims);
  const size_t n = static_cast<size_t>(contracted_dims);
  const std::vector<int64_t> first = layout_of(weights[0]).gathered_shape();
  int64_t k = 1;
  for (size_t d = 0; d < n; ++d) k *= first[d];
  // The output dims after the first must agree: the outputs then stack along the first.
  const std::vector<int64_t> rest(first.begin() + static_cast<int64_t>(n) + 1, first.end());
  int64_t stacked = 0;
  std::vector<at::Tensor> matrices;
  for (const std::string& w : weights) {
    const std::vector<int64_t> shape = layout_of(w).gathered_shape();
    SPMD_ASSERT(std::equal(shape.begin() + static_cast<int64_t>(n) + 1, shape.end(), rest.begin(), rest.end()),
                "dense_concat: {} of shape {} does not stack with {} of shape {}", w, shape, weights[0], first);
    stacked += shape[n];
    matrices.push_back(matmul_param(w).reshape({k, -1}));  // (K, N_i)
  }
  const at::Tensor input = column_input(x, out_tp);
  const int64_t lead = input.dim() - contracted_dims;
  std::vector<int64_t> out_shape(input.sizes().begin(), input.sizes().begin() + lead);
  out_shape.push_back(stacked);
  out_shape.insert(out_shape.end(), rest.begin(), rest.end());
  const at::Tensor y = kernels::side_by_side_product(input.reshape({-1, k}), matrices, matmul_dtype());
  return y.view(out_shape);
}

}  // namespace spmd
