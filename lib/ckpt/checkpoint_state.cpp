// The arrays of the training state a checkpoint holds.
#include "ckpt/checkpoint_state.h"

namespace spmd {

// The rank's block of parameter i's array `kind` (one of its checkpoint_array_kinds).
at::Tensor& checkpoint_local_array(CheckpointState& s, const std::string& kind, size_t i) {
  if (kind == "param") return s.model.params()[i];
  if (kind == "momentum") return s.muon->momentum()[i];
  if (kind == "exp_avg") return s.optimizer.exp_avg()[i];
  return s.optimizer.exp_avg_sq()[i];
}

}  // namespace spmd
