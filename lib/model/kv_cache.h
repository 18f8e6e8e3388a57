// Keys and values of the positions a decoder has already seen, per layer, so that each new token
// costs one position's work. Holds this rank's heads only (whatever the layout gives it).
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

namespace spmd {

struct KvCache {
  std::vector<at::Tensor> keys, values;  // per layer: (B, length, H, D); undefined when empty
  int64_t length = 0;                    // positions held (the next position to feed)

  // Appends the new positions' keys and values (B, T, H, D) to layer `layer`'s.
  void append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
    const size_t l = static_cast<size_t>(layer);
    if (keys.size() <= l) {
      keys.resize(l + 1);
      values.resize(l + 1);
    }
    keys[l] = keys[l].defined() ? at::cat({keys[l], k}, 1) : k.contiguous();
    values[l] = values[l].defined() ? at::cat({values[l], v}, 1) : v.contiguous();
  }

  void clear() {
    keys.clear();
    values.clear();
    length = 0;
  }
};

}  // namespace spmd
