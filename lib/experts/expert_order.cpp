#include "experts/expert_order.h"

namespace spmd {

at::Tensor inverse_permutation(const at::Tensor& order) {
  at::Tensor inverse = at::empty_like(order);
  inverse.index_put_({order}, at::arange(order.numel(), order.options()));
  return inverse;
}

ExpertOrder sort_by_expert(const at::Tensor& choice, int64_t experts) {
  const at::Tensor flat = choice.reshape({-1});
  ExpertOrder o;
  o.rows = std::get<1>(at::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  o.tokens = at::floor_divide(o.rows, choice.size(-1));
  o.inverse = inverse_permutation(o.rows);
  const at::Tensor counts = at::bincount(flat, {}, experts).to(at::kCPU).to(at::kLong);  // the host plans the products
  o.counts.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + experts);
  return o;
}

}  // namespace spmd
