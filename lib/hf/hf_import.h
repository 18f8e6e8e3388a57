// Starting from a pretrained Hugging Face GPT-2 (train.init_from): a model.safetensors file, or a
// directory holding it and config.json. Names with or without GPT2LMHeadModel's `transformer.`
// prefix; the layouts map through hf/name_map.h (the export's exact inverse). The causal
// mask buffers old checkpoints hold (h.N.attn.bias, h.N.attn.masked_bias) are skipped; the LM
// head must be tied (lm_head.weight absent or equal to wte). Parameters only: the optimizer
// state and the step start fresh.
#pragma once
#include <string>

#include "config/config.h"
#include "parallel/sharded_model.h"

namespace spmd {

// The files behind a train.init_from value. UsageError if it names nothing usable.
struct HfCheckpointPaths {
  std::string safetensors;  // the weights
  std::string config_json;  // "" unless init_from is a directory holding config.json
};
HfCheckpointPaths resolve_hf_checkpoint(const std::string& init_from);

// The launcher's check, before any worker starts (a no-op when train.init_from is empty): the
// file opens; every parameter the model config implies is there as float32 with the right shape;
// nothing else is (but the mask buffers and a tied lm_head); config.json, if present, agrees with
// model.*. UsageError naming the file, the tensor, both shapes and the model.* key otherwise.
void check_hf_checkpoint(const Config& config);

// Collective: every rank copies the slices of the file that fall inside its own shards (the file
// is memory-mapped: nothing else is read); vocabulary padding rows are zero, as in our init. A
// rank that does not hold a parameter (another pipeline stage's) skips it. A failure on any rank
// is a UsageError on every rank. Returns the number of parameters this rank loaded.
int load_hf_checkpoint(ShardedModel& model, const std::string& init_from);

}  // namespace spmd
