// The unit gathers behind fsdp_prefetch.h: flat all-gathers and reduce-scatters, the recorded-order
// prefetch, and the plain per-weight gather.
#include "parallel/fsdp_prefetch.h"

#include <algorithm>
#include <map>

#include "util/error.h"

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

// The tensors end to end in one flat buffer (the collectives' input).
at::Tensor flat_of(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return flat.size() == 1 ? flat[0].contiguous() : at::cat(flat);
}

// `gathered`: every member's flat buffer one after another; each tensor's members' pieces joined
// along its dim, in member order.
std::vector<at::Tensor> split_gathered(const at::Tensor& gathered, const std::vector<at::Tensor>& locals,
                                       const std::vector<int64_t>& dims, int64_t members) {
  const at::Tensor flat = gathered.view({members, -1});
  std::vector<at::Tensor> out;
  int64_t offset = 0;
  for (size_t i = 0; i < locals.size(); ++i) {
    const int64_t n = locals[i].numel();
    std::vector<int64_t> full = locals[i].sizes().vec();
    full[static_cast<size_t>(dims[i])] *= members;
    out.push_back(flat.narrow(1, offset, n).unflatten(1, locals[i].sizes()).movedim(0, dims[i]).reshape(full).contiguous());
    offset += n;
  }
  return out;
}

// The pass just finished becomes the order the next one is predicted from.
template <typename Sequence>
void restart(Sequence& seq) {
  if (!seq.current.empty()) seq.recorded = std::move(seq.current);
  seq.current.clear();
  seq.on_track = true;
}

}  // namespace

FsdpPrefetcher::FsdpPrefetcher(std::vector<at::Tensor>& params, const std::vector<FsdpGathers>& gathers,
                               const std::vector<int64_t>& unit_key)
    : params_(&params), unit_of_(params.size(), -1) {
  std::map<std::pair<int64_t, std::vector<const Group*>>, int64_t> unit_by_key;
  for (size_t k = 0; k < params.size(); ++k) {
    if (!params[k].defined() || gathers[k].empty()) continue;
    std::vector<const Group*> levels;
    for (const auto& [dim, group] : gathers[k]) levels.push_back(group);
    auto [it, added] = unit_by_key.emplace(std::make_pair(unit_key[k], levels), static_cast<int64_t>(units_.size()));
    if (added) units_.push_back(Unit{{}, levels, std::vector<std::vector<int64_t>>(levels.size())});
    Unit& unit = units_[static_cast<size_t>(it->second)];
    unit.params.push_back(k);
    for (size_t l = 0; l < levels.size(); ++l) unit.dims[l].push_back(gathers[k][l].first);
    unit_of_[k] = it->second;
  }
}

FsdpPrefetcher::~FsdpPrefetcher() {
  try {
    drain();
  } catch (...) {  // a failed collective has already been reported by the step that hit it
  }
}

std::vector<int64_t> FsdpPrefetcher::gathered_shape(size_t k) const {
  const Unit& unit = units_[static_cast<size_t>(unit_of_[k])];
  const size_t slot = static_cast<size_t>(std::find(unit.params.begin(), unit.params.end(), k) - unit.params.begin());
  std::vector<int64_t> shape = shard(k).sizes().vec();
  for (size_t l = 0; l < unit.levels.size(); ++l) shape[static_cast<size_t>(unit.dims[l][slot])] *= unit.levels[l]->size();
  return shape;
}

FsdpPrefetcher::InFlight FsdpPrefetcher::start(int64_t u) const {
  const Unit& unit = units_[static_cast<size_t>(u)];
  std::vector<at::Tensor> shards;
  for (size_t k : unit.params) shards.push_back(shard(k).detach());
  return InFlight{u, unit.levels[0]->all_gather_async(flat_of(shards), 0)};
}

std::vector<at::Tensor> FsdpPrefetcher::finish(InFlight& flight) const {
  const Unit& unit = units_[static_cast<size_t>(flight.unit)];
  std::vector<at::Tensor> locals;
  for (size_t k : unit.params) locals.push_back(shard(k).detach());
  std::vector<at::Tensor> full = split_gathered(flight.first.wait(), locals, unit.dims[0], unit.levels[0]->size());
  for (size_t l = 1; l < unit.levels.size(); ++l)  // further levels: one blocking gather each
    full = split_gathered(unit.levels[l]->all_gather(flat_of(full), 0), full, unit.dims[l], unit.levels[l]->size());
  return full;
}

std::vector<at::Tensor> FsdpPrefetcher::reduce_scatter(int64_t u, const std::vector<at::Tensor>& full_grads) const {
  const Unit& unit = units_[static_cast<size_t>(u)];
  // A weight without a gradient in this pass (an untied head's: the loss reduce-scatters its own in
  // forward) stays out of the collective and gets none: every rank runs the same graph, so every
  // rank leaves out the same weights.
  std::vector<size_t> live;
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < full_grads.size(); ++i)
    if (full_grads[i].defined()) live.push_back(i), grads.push_back(full_grads[i]);
  std::vector<at::Tensor> out(full_grads.size());
  if (live.empty()) return out;
  for (size_t l = unit.levels.size(); l-- > 0;) {
    const Group& group = *unit.levels[l];
    const int64_t members = group.size();
    // Each weight's gradient as (members, its chunk): the chunks side by side, member by member.
    std::vector<at::Tensor> chunks;
    std::vector<std::vector<int64_t>> local_shapes;
    for (size_t i = 0; i < grads.size(); ++i) {
      const int64_t d = unit.dims[l][live[i]];
      std::vector<int64_t> local = grads[i].sizes().vec();
      local[static_cast<size_t>(d)] /= members;
      local_shapes.push_back(local);
      chunks.push_back(grads[i].unflatten(d, {members, local[static_cast<size_t>(d)]}).movedim(d, 0).reshape({members, -1}));
    }
    const at::Tensor summed = group.reduce_scatter_sum(at::cat(chunks, 1).reshape({-1}), 0);  // this member's chunks
    int64_t offset = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      int64_t n = 1;
      for (int64_t s : local_shapes[i]) n *= s;
      grads[i] = summed.narrow(0, offset, n).view(local_shapes[i]);
      offset += n;
    }
  }
  for (size_t i = 0; i < live.size(); ++i) out[live[i]] = grads[i];
  return out;
}

void FsdpPrefetcher::release() {
  resident_unit_ = -1;
  resident_.clear();
}

void FsdpPrefetcher::drain() {
  release();
  if (!in_flight_) return;
  InFlight flight = std::move(*in_flight_);
  in_flight_.reset();
  flight.first.wait();
}

void FsdpPrefetcher::begin_forward() {
  drain();
  restart(sequences_[static_cast<int>(Pass::kForward)]);
  backward_started_ = false;
}

void FsdpPrefetcher::make_resident(int64_t u) {
  if (resident_unit_ == u) return;
  release();  // before the gather: at most two units gathered (this one and the one in flight)
  if (in_flight_ && in_flight_->unit == u) {
    resident_ = finish(*in_flight_);
    in_flight_.reset();
    ++prefetched_gathers_;
  } else {
    if (in_flight_) {  // a prediction that missed: complete it (every rank started it) and gather now
      in_flight_->first.wait();
      in_flight_.reset();
    }
    InFlight now = start(u);
    resident_ = finish(now);
  }
  resident_unit_ = u;
  ++unit_gathers_;
}

void FsdpPrefetcher::begin_backward() {
  backward_started_ = true;
  restart(sequences_[static_cast<int>(Pass::kBackward)]);
}

at::Tensor FsdpPrefetcher::gather(size_t k, Pass pass) {
  if (backward_started_) pass = Pass::kBackward;  // a recomputed forward's gathers are the backward's
  else if (pass == Pass::kBackward) begin_backward();
  Sequence& seq = sequences_[static_cast<int>(pass)];
  const int64_t u = unit_of_[k];
  SPMD_ASSERT(u >= 0, "FSDP gather of parameter {}, which is not FSDP-sharded", k);
  if (seq.current.empty() || seq.current.back() != u) {  // the pass moves on to another unit
    const size_t position = seq.current.size();
    seq.current.push_back(u);
    seq.on_track = seq.on_track && position < seq.recorded.size() && seq.recorded[position] == u;
    make_resident(u);
    if (enabled_ && seq.on_track && position + 1 < seq.recorded.size() && !in_flight_) {
      const int64_t next = seq.recorded[position + 1];
      if (next != resident_unit_) in_flight_ = start(next);
    }
  } else {
    make_resident(u);  // still resident, unless another pass's unit replaced it meanwhile
  }
  ++total_uses_;
  const auto& ps = units_[static_cast<size_t>(u)].params;
  return resident_[static_cast<size_t>(std::find(ps.begin(), ps.end(), k) - ps.begin())];
}

}  // namespace spmd
