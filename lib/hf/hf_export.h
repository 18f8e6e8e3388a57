// Consolidates a sharded checkpoint into one safetensors file with Hugging Face GPT-2 names
// (transformer.h.0.attn.c_attn.weight ...), so the model opens in the wider ecosystem.
#pragma once
#include <string>

namespace spmd {

// Reads every block of every parameter (checksums verified), assembles the global tensors,
// renames and reshapes them to GPT-2's layout and writes `out_path` (via a temp file + rename).
// Returns the number of tensors written.
int export_hf_gpt2(const std::string& checkpoint_dir, const std::string& out_path);

}  // namespace spmd
