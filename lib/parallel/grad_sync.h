// Gradient synchronization, overlapped with backward, and the global gradient norm.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/group.h"
#include "parallel/sharded_model.h"

namespace spmd {

// Each rank's loss is the mean over its own tokens, so the global gradient is the mean over the
// data- and context-parallel ranks: sum over the batch and context axes a parameter is replicated
// on (FSDP dims were already reduce-scattered in backward), then divide by the number of token
// splits (data-parallel x context-parallel degree). Under sequence
// parallelism a per-position parameter's gradient is also summed over the sequence split. With M
// microbatches each backward's loss is the mean over a microbatch: the M gradients are summed and
// divided by M too.
//
// Gradients are packed into buckets of about `bucket_bytes` (per group, in reverse parameter
// order, which is roughly the order backward produces them). Each such parameter's .grad is a
// view of its slot in the bucket (DDP's gradient_as_bucket_view): autograd accumulates into the
// bucket itself, so a rank holds one gradient-sized buffer, not two. A hook after each
// accumulation counts the bucket's arrivals; when a bucket is complete its all-reduce starts while
// backward goes on (PyTorch DDP's scheme). bucket_bytes 0: one bucket per group, reduced after
// backward. The hooks act in the step's last backward only (arm()): the backwards of earlier
// microbatches just accumulate, so each bucket is all-reduced once a step (DDP's no_sync).
class GradientSync {
 public:
  // Point-to-point tags of the stage-shared gradients (one per parameter), above any microbatch's.
  static constexpr int kSharedGradientTag = 1 << 24;

  GradientSync(ShardedModel& model, int64_t bucket_bytes);
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Before the step's first backward: zeroes the buckets (bucketed parameters' .grad) and clears
  // the other gradients; `microbatches` backwards follow.
  void begin(int64_t microbatches);
  // Before the step's last backward: its hooks start each bucket's all-reduce as soon as the
  // bucket is complete. Backwards before it communicate nothing.
  void arm();
  // After the last backward: starts the buckets not yet started, waits for all, and leaves every
  // parameter's .grad averaged over ranks and microbatches (views into the bucket buffers).
  void finish();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  int64_t buckets_started_during_backward() const { return started_early_; }  // this step
  // Bucket all-reduces since construction, and those of them started during a backward.
  int64_t total_reductions() const { return total_reductions_; }
  int64_t total_started_during_backward() const { return total_started_early_; }
  // The bytes of the bucket buffers, and how many bucketed parameters' .grad lie outside their
  // bucket (0 unless something replaced a .grad): the facts behind "one gradient buffer".
  int64_t bucket_bytes() const;
  int64_t grads_outside_buckets() const;

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
  void on_gradient(size_t param);  // after autograd accumulated into the parameter's slot
  at::Tensor bucket_view(size_t param) const;
  void start(Bucket& bucket);
  // A parameter held on several pipeline stages (the tied embedding: first and last) has a
  // partial gradient on each: every holder sends its own to the others and adds all of them in
  // stage order, so the holders' sums, and their updates, are bitwise equal. The gradients shared
  // by the same stages travel as one flat buffer, and the sum lands in each .grad in place.
  void sum_over_stages();
  // Every holder's copy of `mine` (this rank's among them, at `own_index`), in stage order.
  std::vector<at::Tensor> exchange_with_holders(const at::Tensor& mine, const Placement& placed, int tag,
                                                size_t& own_index);

  ShardedModel& model_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;     // per parameter; -1 when its gradient needs no all-reduce
  std::vector<bool> arrived_;      // per parameter, this step
  bool armed_ = false;
  int64_t microbatches_ = 1;
  int64_t started_early_ = 0;
  int64_t total_reductions_ = 0, total_started_early_ = 0;
};

// sqrt of the sum of squared gradients, each distinct block counted once (replicas skipped):
// a 0-dim float64 tensor on the rank's device (reading it is the caller's choice).
at::Tensor global_grad_norm(const ShardedModel& model);

}  // namespace spmd
