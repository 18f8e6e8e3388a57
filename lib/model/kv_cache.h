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

  void clear() {
    keys.clear();
    values.clear();
    length = 0;
  }
};

}  // namespace spmd
