// Gradient synchronization, overlapped with backward, and the global gradient norm.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/group.h"
#include "parallel/sharded_model.h"

namespace spmd {

// Each rank's loss is the mean over its own rows, so the global gradient is the mean over the
// data-parallel ranks: sum over the batch axes a parameter is replicated on (FSDP dims were
// already reduce-scattered in backward), then divide by the data-parallel degree.
//
// Gradients are packed into buckets of about `bucket_bytes` (per group, in reverse parameter
// order, which is roughly the order backward produces them). A hook on each parameter copies its
// gradient into its bucket as soon as autograd has it; when a bucket is full its all-reduce
// starts while backward goes on (PyTorch DDP's scheme). bucket_bytes 0: one bucket per group,
// reduced after backward.
class GradientSync {
 public:
  GradientSync(ShardedModel& model, int64_t bucket_bytes);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Before loss.backward(): clears the gradients and arms the hooks.
  void begin();
  // After backward: starts the buckets not yet started, waits for all, and leaves every
  // parameter's .grad averaged (views into the bucket buffers).
  void finish();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  int64_t buckets_started_during_backward() const { return started_early_; }  // this step

 private:
  struct Bucket {
    const Group* group = nullptr;
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // of each param in `buffer`
    at::Tensor buffer;
    size_t arrived = 0;
    bool started = false;
    PendingCollective pending;
  };
  void on_gradient(size_t param, const at::Tensor& grad);
  void start(Bucket& bucket);

  ShardedModel& model_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;     // per parameter; -1 when its gradient needs no all-reduce
  std::vector<bool> arrived_;      // per parameter, this step
  std::vector<unsigned> hook_ids_;
  bool armed_ = false;
  int64_t started_early_ = 0;
};

// sqrt of the sum of squared gradients, each distinct block counted once (replicas skipped):
// a 0-dim float64 tensor on the rank's device (reading it is the caller's choice).
at::Tensor global_grad_norm(const ShardedModel& model);

}  // namespace spmd
