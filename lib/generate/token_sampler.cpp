// Sampling in float64 on the host: the vocabulary is small next to a forward pass.
#include "generate/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "parallel/counter_rng.h"
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd {

namespace {
// Ids ordered by logit, largest first; equal logits by id (a total order: no platform-dependent ties).
std::vector<int64_t> ids_by_logit(const std::vector<double>& logits) {
  std::vector<int64_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  return ids;
}
}  // namespace

int64_t choose_token(const at::Tensor& logits, const SamplingOptions& options, int64_t position) {
  SPMD_ASSERT(logits.dim() == 1 && logits.numel() > 0, "choose_token: logits must be (vocab,), got {}",
              logits.sizes().vec());
  const at::Tensor host = logits.detach().to(at::kCPU, at::kDouble).contiguous();
  const std::vector<double> values(host.data_ptr<double>(), host.data_ptr<double>() + host.numel());
  std::vector<int64_t> ids = ids_by_logit(values);
  if (options.temperature <= 0) return ids.front();
  if (options.top_k > 0 && options.top_k < static_cast<int64_t>(ids.size())) ids.resize(static_cast<size_t>(options.top_k));
  // softmax(logit / T) over the kept ids, then the first id whose cumulative mass reaches u.
  std::vector<double> mass(ids.size());
  const double top = values[static_cast<size_t>(ids.front())];
  for (size_t i = 0; i < ids.size(); ++i) mass[i] = std::exp((values[static_cast<size_t>(ids[i])] - top) / options.temperature);
  const double total = std::accumulate(mass.begin(), mass.end(), 0.0);
  const double u = uniform_draw(options.seed, stream_id("sample"), static_cast<uint64_t>(position)) * total;
  double cumulative = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cumulative += mass[i];
    if (cumulative >= u) return ids[i];
  }
  return ids.back();  // u == total up to rounding
}

}  // namespace spmd
