// Top-k routing by a stable sort: among equal scores the lower expert index comes first, as the
// issue's semantics (and a deterministic layout-free choice) require; E is small, so a sort of
// each token's E scores costs little next to its products.
#include "experts/router.h"

namespace spmd {

Routing route_tokens(const at::Tensor& logits, int64_t k, bool normalize, const at::Tensor& choice_bias) {
  Routing r;
  r.probs = at::softmax(logits.to(at::kFloat), -1);
  const at::Tensor scores = choice_bias.defined() ? r.probs.detach() + choice_bias : r.probs.detach();
  r.choice = std::get<1>(at::sort(scores, /*stable=*/true, /*dim=*/-1, /*descending=*/true)).narrow(-1, 0, k).contiguous();
  r.weights = r.probs.gather(-1, r.choice);
  if (normalize) r.weights = r.weights / r.weights.sum(-1, /*keepdim=*/true);
  return r;
}

}  // namespace spmd
