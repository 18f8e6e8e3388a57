// Starting from a pretrained Hugging Face model (train.init_from) of model.arch's family: GPT-2
// from a model.safetensors file or a folder holding it (config.json optional); Llama from a folder
// with config.json and model.safetensors or a sharded model.safetensors.index.json. Weights in
// float32, bfloat16 or float16 become float32 master weights. Names with or without the family's
// prefix (`transformer.`, `model.`); the layouts map through hf/name_map.h (the export's exact
// inverse). Buffers old checkpoints hold (GPT-2's causal masks, Llama's inv_freq) are skipped; a
// tied head's lm_head.weight must equal the embedding. Parameters only: the optimizer state and
// the step start fresh.
#pragma once
#include <string>

#include "config/config.h"
#include "parallel/sharded_model.h"

namespace spmd {

// The files behind a train.init_from value. UsageError if it names nothing usable.
struct HfCheckpointPaths {
  std::string safetensors;  // the weights: a .safetensors file or a model.safetensors.index.json
  std::string config_json;  // "" unless init_from is a directory holding config.json
};
HfCheckpointPaths resolve_hf_checkpoint(const std::string& init_from);

// The launcher's check, before any worker starts (a no-op when train.init_from is empty): the
// files open; every parameter the model config implies is there as a float with the right shape;
// nothing else is (but the buffers and a tied lm_head); config.json agrees with model.*
// (hf_config.h). UsageError naming the file, the tensor, both shapes and the model.* key otherwise.
void check_hf_checkpoint(const Config& config);

// Collective: every rank copies the slices of the file that fall inside its own shards (the file
// is memory-mapped: nothing else is read); vocabulary padding rows are zero, as in our init. A
// rank that does not hold a parameter (another pipeline stage's) skips it. A failure on any rank
// is a UsageError on every rank. Returns the number of parameters this rank loaded.
int load_hf_checkpoint(ShardedModel& model, const std::string& init_from);

}  // namespace spmd
