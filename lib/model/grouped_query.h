// Grouped-query attention's key/value heads, repeated to the query heads they serve where a kernel
// needs one key/value head per query head (decoding, the device-generic path).
#pragma once
#include <ATen/ATen.h>

namespace spmd {

// Key/value heads (B, T, Hkv, D) repeated to `heads` query heads: query head i uses key/value head
// i / (heads / Hkv). Sharding `heads` splits both into contiguous blocks, so this holds on every
// rank's local heads too.
at::Tensor repeat_kv(const at::Tensor& kv, int64_t heads);

}  // namespace spmd
