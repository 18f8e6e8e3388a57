// Per-device memory estimate of a training run, before launching anything.
#pragma once
#include <cstdint>

#include "parallel/layout.h"

namespace spmd {

struct MemoryEstimate {
  int64_t params = 0;        // this device's parameter shards
  int64_t grads = 0;         // gradients: same sharding as the parameters
  int64_t optimizer = 0;     // AdamW m and v: same sharding as the parameters
  int64_t fsdp_gathered = 0; // FSDP working set: the largest gathered weight, its gradient, the prefetch
  int64_t activations = 0;   // saved for backward, for this device's share of the batch
  int64_t total() const { return params + grads + optimizer + fsdp_gathered + activations; }
};

// Bytes for fp32 on the device `rank` (all ranks are alike in the layouts we support).
MemoryEstimate estimate_memory(const ModelLayout& layout, int64_t global_batch, int64_t rank = 0);

// The same model on one device with everything replicated.
MemoryEstimate estimate_unsharded_memory(const ModelConfig& model, int64_t global_batch);

}  // namespace spmd
