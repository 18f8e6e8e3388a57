// The Muon matrices of a layout, their nn.Linear view, and their owners.
#include "muon/muon_matrices.h"

#include <algorithm>
#include <numeric>

#include "util/error.h"

namespace spmd {

double newton_schulz_flops(int64_t rows, int64_t cols, int64_t steps) {
  const double r = static_cast<double>(std::min(rows, cols)), c = static_cast<double>(std::max(rows, cols));
  return static_cast<double>(steps) * (4 * r * r * c + 2 * r * r * r);
}

namespace {
// (in_features, out_features) of a weight stored with `input_dims` leading input dims.
std::pair<int64_t, int64_t> muon_fan_in_out(const std::vector<int64_t>& shape, int64_t input_dims) {
  int64_t in = 1, out = 1;
  for (size_t d = 0; d < shape.size(); ++d) (static_cast<int64_t>(d) < input_dims ? in : out) *= shape[d];
  return {in, out};
}
}  // namespace

std::vector<MuonMatrix> plan_muon_matrices(const ModelLayout& layout, int64_t rank, int64_t group_size,
                                           int64_t ns_steps) {
  std::vector<MuonMatrix> matrices;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamLayout& p = layout.params[i];
    if (!takes_muon(p.info) || !p.sharding.holds(rank)) continue;
    const auto [in, out] = muon_fan_in_out(p.info.shape, p.info.input_dims);
    matrices.push_back({i, out, in, newton_schulz_flops(out, in, ns_steps), 0});
  }
  std::vector<size_t> order(matrices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return matrices[a].cost > matrices[b].cost; });
  std::vector<double> load(static_cast<size_t>(std::max<int64_t>(group_size, 1)), 0.0);
  for (size_t k : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equals
    matrices[k].owner = least - load.begin();
    *least += matrices[k].cost;
  }
  return matrices;
}

at::Tensor as_linear(const at::Tensor& stored, int64_t input_dims) {
  const auto [in, out] = muon_fan_in_out(stored.sizes().vec(), input_dims);
  return stored.reshape({in, out}).t().contiguous();
}

at::Tensor from_linear(const at::Tensor& linear, at::IntArrayRef stored_shape) {
  SPMD_ASSERT(linear.dim() == 2, "from_linear: a 2-D matrix");
  return linear.t().contiguous().reshape(stored_shape);
}

}  // namespace spmd
