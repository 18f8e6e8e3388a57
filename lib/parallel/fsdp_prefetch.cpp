// The recorded-order prefetcher behind fsdp_prefetch.h, and the plain gather / reduce-scatter.
#include "parallel/fsdp_prefetch.h"

namespace spmd {

at::Tensor fsdp_gather(const at::Tensor& shard, const FsdpGathers& gathers) {
  at::Tensor t = shard;
  for (const auto& [dim, group] : gathers) t = group->all_gather(t, dim);
  return t;
}

at::Tensor fsdp_reduce_scatter(const at::Tensor& grad, const FsdpGathers& gathers) {
  at::Tensor g = grad;
  for (auto it = gathers.rbegin(); it != gathers.rend(); ++it) g = it->second->reduce_scatter_sum(g, it->first);
  return g;
}

namespace {
// The pass just finished becomes the order the next one is predicted from.
template <typename Sequence>
void restart(Sequence& seq) {
  if (!seq.current.empty()) seq.recorded = std::move(seq.current);
  seq.current.clear();
  seq.on_track = true;
}
}  // namespace

FsdpPrefetcher::~FsdpPrefetcher() {
  try {
    drain();
  } catch (...) {  // a failed collective has already been reported by the step that hit it
  }
}

void FsdpPrefetcher::drain() {
  if (!in_flight_) return;
  InFlight flight = std::move(*in_flight_);
  in_flight_.reset();
  flight.first.wait();
}

at::Tensor FsdpPrefetcher::finish(InFlight& flight) { return fsdp_gather(flight.first.wait(), flight.rest); }

void FsdpPrefetcher::begin_forward() {
  drain();
  restart(sequences_[static_cast<int>(Pass::kForward)]);
  backward_started_ = false;
}

at::Tensor FsdpPrefetcher::gather(const at::Tensor& shard, const FsdpGathers& gathers, Pass pass) {
  Sequence& seq = sequences_[static_cast<int>(pass)];
  if (pass == Pass::kBackward && !backward_started_) {
    backward_started_ = true;
    restart(seq);
  }
  const size_t position = seq.current.size();
  const void* key = shard.data_ptr();
  at::Tensor full;
  if (in_flight_ && in_flight_->pass == pass && in_flight_->position == position && in_flight_->key == key) {
    full = finish(*in_flight_);
    in_flight_.reset();
    ++prefetched_uses_;
  } else {
    drain();  // a prediction that missed: complete it (every rank started it) and gather now
    full = fsdp_gather(shard, gathers);
  }
  ++total_uses_;
  seq.on_track = seq.on_track && position < seq.recorded.size() && seq.recorded[position].key == key;
  seq.current.push_back({key, shard, gathers});
  if (enabled_ && seq.on_track && position + 1 < seq.recorded.size()) {
    const Use& next = seq.recorded[position + 1];
    const auto& [dim, group] = next.gathers.front();
    in_flight_ = InFlight{pass, position + 1, next.key, group->all_gather_async(next.shard, dim),
                          FsdpGathers(next.gathers.begin() + 1, next.gathers.end())};
  }
  return full;
}

}  // namespace spmd
