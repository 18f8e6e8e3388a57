// FSDP prefetch: while one layer computes with its gathered weight, the next layer's all-gather is
// already on the wire. Every rank runs the same graph, so the order in which FSDP weights are used
// in a forward (and in a backward) repeats from step to step; the prefetcher records that order on
// the first pass and, from then on, starts the gather of use i+1 when use i asks for its weight.
// At most one gather is in flight, so the working set grows by one gathered weight.
//
// A use that does not match the recorded order (the graph changed) is gathered on the spot and the
// prediction is dropped for the rest of that pass; every rank decides the same way, so the
// collectives stay in the same order everywhere.
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

  explicit FsdpPrefetcher(bool enabled = true) : enabled_(enabled) {}
  ~FsdpPrefetcher();  // waits for a gather still in flight
  FsdpPrefetcher(const FsdpPrefetcher&) = delete;
  FsdpPrefetcher& operator=(const FsdpPrefetcher&) = delete;

  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }

  // A new forward pass begins (and with it a new backward): passes restart from their first use.
  void begin_forward();
  // Waits for a gather still in flight (a pass that ended short of its recorded order): call
  // before the parameters change.
  void drain();

  // The gathered weight for the next use in `pass`; starts the gather the pass will ask for next.
  at::Tensor gather(const at::Tensor& shard, const FsdpGathers& gathers, Pass pass);

  // Uses served by a gather started ahead of time, and all uses, since construction.
  int64_t prefetched_uses() const { return prefetched_uses_; }
  int64_t total_uses() const { return total_uses_; }

 private:
  struct Use {
    const void* key;  // the shard's storage: stable, since the optimizer updates in place
    at::Tensor shard;
    FsdpGathers gathers;
  };
  struct Sequence {
    std::vector<Use> recorded;  // the last complete pass
    std::vector<Use> current;   // this pass so far
    bool on_track = true;       // current matches recorded so far
  };
  struct InFlight {
    Pass pass;
    size_t position;
    const void* key;
    PendingGather first;   // the first gather, asynchronous
    FsdpGathers rest;      // further gathers (a weight sharded on several dims): done at wait
  };

  static at::Tensor finish(InFlight& flight);

  bool enabled_;
  bool backward_started_ = false;
  Sequence sequences_[2];
  std::optional<InFlight> in_flight_;
  int64_t prefetched_uses_ = 0;
  int64_t total_uses_ = 0;
};

// The gather without prefetch, and its gradient (reduce-scatters in reverse order); no autograd.
at::Tensor fsdp_gather(const at::Tensor& shard, const FsdpGathers& gathers);
at::Tensor fsdp_reduce_scatter(const at::Tensor& grad, const FsdpGathers& gathers);

}  // namespace spmd
