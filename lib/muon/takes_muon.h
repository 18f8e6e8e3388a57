// Which parameters take Muon under train.optimizer muon: the dense weights inside the blocks
// (attention and MLP matrices); embeddings, the head, norms and biases take AdamW. Free of
// libtorch, so that the memory estimate (which the torch-free fuzz build compiles) can ask too.
#pragma once
#include "config/config.h"
#include "model/params.h"

namespace spmd {

inline bool takes_muon(const ParamInfo& p) { return p.layer >= 0 && p.input_dims > 0; }

inline bool takes_muon(const TrainConfig& train, const ParamInfo& p) {
  return train.optimizer == Optimizer::kMuon && takes_muon(p);
}

}  // namespace spmd
