// FSDP gathers per unit, not per weight: the FSDP weights of one transformer block (and those
// outside the stack: embeddings, final norm, head) form a unit, gathered by one all-gather over a
// flat buffer of their shards, and their gradients reduce-scattered by one collective (PyTorch
// FSDP2's parameter groups). The unit of a weight comes from its parameter table entry
// (ParamInfo.layer) and the groups it is gathered over; nothing here knows a model.
//
// A unit gathered stays resident while the weights asked for are its own (a block's layers one
// after another); asking for another unit's weight replaces it. Every rank runs the same graph,
// so the order of units in a forward (and in a backward) repeats from step to step: the
// prefetcher records it on the first pass and from then on starts the gather of the next unit
// when one begins. At most one gather is in flight: the working set is two units' gathered weights.
// A pass that leaves the recorded order is gathered on the spot from there on; every rank decides
// the same way, so the collectives stay in the same order everywhere.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "comm/group.h"

namespace spmd {

// How a shard becomes the tensor a layer computes with: all-gathers along (dim, group), in order.
using FsdpGathers = std::vector<std::pair<int64_t, const Group*>>;

class FsdpPrefetcher {
 public:
  enum class Pass { kForward, kBackward };

  // `params`: the model's parameters (outlives this); gathers[k] empty for a weight not FSDP;
  // unit_key[k]: weights with equal keys and equal groups form one unit (the block index).
  FsdpPrefetcher(std::vector<at::Tensor>& params, const std::vector<FsdpGathers>& gathers,
                 const std::vector<int64_t>& unit_key);
  ~FsdpPrefetcher();  // waits for a gather still in flight
  FsdpPrefetcher(const FsdpPrefetcher&) = delete;
  FsdpPrefetcher& operator=(const FsdpPrefetcher&) = delete;

  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }

  // The unit of weight k (-1: not FSDP), and a unit's weights in order.
  int64_t unit_of(size_t k) const { return unit_of_[k]; }
  const std::vector<size_t>& unit_params(int64_t unit) const { return units_[static_cast<size_t>(unit)].params; }
  const at::Tensor& shard(size_t k) const { return (*params_)[k]; }
  std::vector<int64_t> gathered_shape(size_t k) const;

  // A new forward pass begins (and with it a new backward): passes restart from their first unit;
  // the resident unit goes (the parameters may have changed since).
  void begin_forward();
  // A backward pass begins (called by the step before it runs a backward; otherwise the pass's
  // first backward gather begins it). Until the next begin_forward every gather is the backward's,
  // a forward recomputed inside it (runtime.remat) included: the order recorded and predicted is
  // the order in time, so a forward's last unit never prefetches a unit for a recomputation the
  // step drops at the forward's end (a wasted all-gather, and a unit in flight beside the graph).
  void begin_backward();
  // Drops the resident unit (a pass ended: its weights need not stay gathered).
  void release();
  // Waits for a gather still in flight and drops the resident unit: call before the parameters change.
  void drain();

  // Weight k gathered, for a use in `pass`; starts the gather of the unit the pass will ask for next.
  at::Tensor gather(size_t k, Pass pass);
  // The shards' gradients of `unit` from its weights' full gradients, one reduce-scatter per
  // gather level over those defined (an undefined one: no gradient, and none sent); no autograd.
  std::vector<at::Tensor> reduce_scatter(int64_t unit, const std::vector<at::Tensor>& full_grads) const;

  // Weight uses, unit gathers, and those of them started ahead of time, since construction.
  int64_t total_uses() const { return total_uses_; }
  int64_t unit_gathers() const { return unit_gathers_; }
  int64_t prefetched_gathers() const { return prefetched_gathers_; }

 private:
  struct Unit {
    std::vector<size_t> params;
    std::vector<const Group*> levels;           // the groups gathered over, in order
    std::vector<std::vector<int64_t>> dims;     // per level, per weight: the dim gathered
  };
  struct Sequence {
    std::vector<int64_t> recorded;  // the units of the last complete pass, one per run
    std::vector<int64_t> current;   // this pass so far
    bool on_track = true;
  };
  struct InFlight {
    int64_t unit;
    PendingGather first;  // the first level, asynchronous; further levels done at wait
  };

  InFlight start(int64_t unit) const;
  std::vector<at::Tensor> finish(InFlight& flight) const;
  void make_resident(int64_t unit);  // from the resident unit, the gather in flight, or a gather now

  std::vector<at::Tensor>* params_;
  std::vector<Unit> units_;
  std::vector<int64_t> unit_of_;
  bool enabled_ = true;
  bool backward_started_ = false;
  Sequence sequences_[2];
  std::optional<InFlight> in_flight_;
  int64_t resident_unit_ = -1;
  std::vector<at::Tensor> resident_;  // the resident unit's weights, gathered
  int64_t total_uses_ = 0, unit_gathers_ = 0, prefetched_gathers_ = 0;
};

// One weight's gather without a unit, and its gradient (reduce-scatters in reverse order).
at::Tensor fsdp_gather(const at::Tensor& shard, const FsdpGathers& gathers);
at::Tensor fsdp_reduce_scatter(const at::Tensor& grad, const FsdpGathers& gathers);

}  // namespace spmd
