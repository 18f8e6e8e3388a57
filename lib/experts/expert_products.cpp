#include "experts/expert_products.h"

#include "kernels/kernels.h"
#include "util/error.h"

namespace spmd {

at::Tensor grouped_swiglu_experts(const at::Tensor& x, const std::vector<int64_t>& counts, const at::Tensor& gate,
                                  const at::Tensor& up, const at::Tensor& down, at::ScalarType operands) {
  SPMD_ASSERT(static_cast<int64_t>(counts.size()) == gate.size(0), "{} row counts for {} experts", counts.size(),
              gate.size(0));
  std::vector<at::Tensor> outputs;
  int64_t begin = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int64_t rows = counts[e];
    if (rows == 0) continue;  // an expert no token reached: no product (its gradient stays zero)
    const auto i = static_cast<int64_t>(e);
    const at::Tensor xe = x.narrow(0, begin, rows);
    const at::Tensor h = kernels::swiglu(kernels::dense_product(xe, gate[i], {}, operands),
                                         kernels::dense_product(xe, up[i], {}, operands));
    outputs.push_back(kernels::dense_product(h, down[i], {}, operands).to(at::kFloat));
    begin += rows;
  }
  if (outputs.empty()) return at::zeros({0, down.size(2)}, x.options().dtype(at::kFloat));
  return at::cat(outputs, 0);
}

}  // namespace spmd
