// Muon on a sharded model (train.optimizer muon): torch.optim.Muon's update for the blocks'
// matrices, exact on every layout. The momentum takes each matrix's sharding; the Newton-Schulz
// iteration sees the whole matrix: each matrix's update is gathered from its shards, its owner
// (one rank of the pipeline stage's group, spread by cost) orthogonalises it and broadcasts the
// result, and every rank steps its own block. The other parameters are AdamW's (optim/adamw.h).
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "config/config.h"
#include "muon/muon_matrices.h"
#include "parallel/sharded_model.h"

namespace spmd {

class Muon {
 public:
  // Collective (creates the stage's group): every rank of the run constructs it, in the same order.
  Muon(ShardedModel& model, const MuonConfig& config);

  // One update with learning rate `lr` (train.muon.lr on the schedule); gradients synchronized,
  // each used multiplied by `grad_scale` (the clipping factor). Collective over the stage.
  void step(double lr, double grad_scale = 1.0);
  // The same with `grad_scale` (0-dim float64) and `apply` (0-dim bool) on the device: where
  // `apply` is false the parameters and momentum stay as they were. No host synchronization.
  void step_on_device(double lr, const at::Tensor& grad_scale, const at::Tensor& apply);

  // The momentum buffers by parameter index: this rank's block, undefined off the Muon matrices.
  std::vector<at::Tensor>& momentum() { return momentum_; }
  const std::vector<MuonMatrix>& matrices() const { return matrices_; }
  int64_t state_bytes() const;
  // Newton-Schulz flops this rank ran per step (the matrices it owns).
  double owned_flops() const;

 private:
  // The whole matrix's orthogonalised update from this rank's block of it, cut back to the block.
  at::Tensor orthogonalized_block(const MuonMatrix& m, const at::Tensor& update_block) const;

  ShardedModel* model_;
  MuonConfig config_;
  const Group* stage_group_;          // the ranks of this pipeline stage (every mesh axis but its)
  std::vector<MuonMatrix> matrices_;  // this stage's, in parameter order
  std::vector<at::Tensor> momentum_;
};

}  // namespace spmd
