// The safetensors file format (8-byte little-endian header length, JSON header, raw data), so any
// safetensors reader can open our shards and exports. We write fp32 tensors only;
// Hugging Face's bf16 and f16 ones are read too.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "util/mapped_file.h"

namespace spmd {

struct NamedTensor {
  std::string name;
  at::Tensor tensor;  // float32; written contiguous
};

// The start of a safetensors file holding `tensors` in the given order (8-byte length, JSON
// header, padding to 8 bytes), and where each tensor's bytes go, as absolute file offsets.
struct SafetensorsLayout {
  std::string header;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) per tensor
};
SafetensorsLayout safetensors_layout(const std::vector<NamedTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata = {});

// Writes and fsyncs `path`. Tensors are laid out in the given order.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor block's checksum as checkpoint indexes record it: "crc32c:" and 8 hex digits (CRC-32C
// by ISA-L, many GB/s: the background writer and the loader pass over every byte).
std::string block_checksum(const void* data, size_t size);
// Whether `recorded` is the block's checksum: block_checksum's form, or the 16 hex digits of the
// byte-at-a-time 64-bit FNV-1a that earlier checkpoints hold (~4 cycles a byte; still read).
bool checksum_matches(const std::string& recorded, const void* data, size_t size);

struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
};

// A memory-mapped safetensors file with its header validated: every entry's offsets lie inside
// the file and match its shape. UsageError naming the file otherwise (truncated, corrupted).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A read-only view of a float32 tensor (valid while this object lives).
  at::Tensor tensor(const std::string& name) const;
  // A read-only view of an F32, BF16 or F16 tensor in its own dtype (Hugging Face weights).
  at::Tensor float_tensor(const std::string& name) const;
  const unsigned char* bytes(const std::string& name) const;
  uint64_t data_start() const { return data_start_; }

 private:
  MappedFile file_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace spmd
