// A checkpoint for the wider ecosystem: consolidated into Hugging Face names and layouts
// (GPT2LMHeadModel's, or the Llama family's: LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM,
// Qwen2MoeForCausalLM or MixtralForCausalLM, by the checkpoint's model.*: hf_map in name_map.h), as
// one safetensors file or as a folder that from_pretrained opens.
#pragma once
#include <string>

namespace spmd {

// Reads every block of every parameter (checksums verified) and assembles the global tensors.
// `out` ending in .safetensors: writes that one file (via a temp file + rename). Otherwise `out`
// is a folder, created (UsageError if it exists and is not empty), holding config.json,
// model.safetensors and the tokenizer files the checkpoint carries (vocab.json + merges.txt, or
// tokenizer.json). Returns the number of tensors written.
int export_hf(const std::string& checkpoint_dir, const std::string& out);

}  // namespace spmd
