// How wide a token id is on disk: uint16 (GPT-2-size vocabularies, nanoGPT's and llm.c's GPT-2
// files) or uint32 (larger ones, e.g. Llama 3's 128,256 ids; llm.c's Llama 3 shards). Little-endian.
// meta.json names it in "dtype"; llm.c shards say it by their header's magic and version.
#pragma once
#include <cstdint>
#include <string>

namespace spmd {

enum class TokenWidth { kU16 = 2, kU32 = 4 };

inline size_t bytes_per_token(TokenWidth w) { return static_cast<size_t>(w); }

// "uint16" / "uint32": meta.json's "dtype", numpy's name for the type.
inline const char* dtype_name(TokenWidth w) { return w == TokenWidth::kU32 ? "uint32" : "uint16"; }

// The narrowest width that holds every id of a vocabulary of vocab_size ids.
inline TokenWidth token_width_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenWidth::kU16 : TokenWidth::kU32;
}

// The largest id a width holds.
inline int64_t max_token_id(TokenWidth w) { return w == TokenWidth::kU32 ? 0xFFFFFFFFll : 0xFFFFll; }

}  // namespace spmd
