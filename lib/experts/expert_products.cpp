#include "experts/expert_products.h"

#include "kernels/kernels.h"
#include "util/error.h"

namespace spmd {

at::Tensor grouped_swiglu_experts(const at::Tensor& x, const std::vector<int64_t>& counts, const at::Tensor& gate,
                                  const at::Tensor& up, const at::Tensor& down, at::ScalarType operands) {
  SPMD_ASSERT(static_cast<int64_t>(counts.size()) == gate.size(0), "{} row counts for {} experts", counts.size(),
              gate.size(0));
  // unbind: one backward node stacks every expert's gradient once (indexing would zero-fill and
  // add a whole (E, C, I) gradient per expert).
  const std::vector<at::Tensor> gates = gate.unbind(0), ups = up.unbind(0), downs = down.unbind(0);
  std::vector<at::Tensor> outputs;
  int64_t begin = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    // An expert no token reached still runs its (empty) product: every rank builds the same graph,
    // so its backward issues its collectives in the same order as every other rank's.
    const int64_t rows = counts[e];
    const at::Tensor xe = x.narrow(0, begin, rows);
    const at::Tensor h = kernels::swiglu(kernels::dense_product(xe, gates[e], {}, operands),
                                         kernels::dense_product(xe, ups[e], {}, operands));
    outputs.push_back(kernels::dense_product(h, downs[e], {}, operands).to(at::kFloat));
    begin += rows;
  }
  return at::cat(outputs, 0);
}

}  // namespace spmd
