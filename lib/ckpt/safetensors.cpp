// safetensors writer and validating reader.
#include "ckpt/safetensors.h"

#include <cstring>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/checked_size.h"
#include "util/crc32c.h"
#include "util/durable_file.h"
#include "util/error.h"

namespace spmd {

namespace {
constexpr std::string_view kCrc32cPrefix = "crc32c:";

uint64_t fnv1a_64(const void* data, size_t size) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
}  // namespace

std::string block_checksum(const void* data, size_t size) {
  return fmt::format("{}{:08x}", kCrc32cPrefix, crc32c(data, size));
}

bool checksum_matches(const std::string& recorded, const void* data, size_t size) {
  if (recorded.rfind(kCrc32cPrefix, 0) == 0) return recorded == block_checksum(data, size);
  return recorded == fmt::format("{:016x}", fnv1a_64(data, size));
}

SafetensorsLayout safetensors_layout(const std::vector<NamedTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    SPMD_ASSERT(t.tensor.scalar_type() == at::kFloat, "{}: only float32 is written", t.name);
    const uint64_t bytes = static_cast<uint64_t>(t.tensor.numel()) * 4;
    header[t.name] = {{"dtype", "F32"}, {"shape", t.tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    ranges.push_back({offset, offset + bytes});
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  SafetensorsLayout layout;
  layout.header.assign(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) layout.header[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  layout.header += json;
  for (auto& r : ranges) layout.ranges.push_back({layout.header.size() + r.first, layout.header.size() + r.second});
  return layout;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<NamedTensor> host;
  for (const auto& t : tensors) host.push_back({t.name, t.tensor.detach().to(at::kCPU).contiguous()});  // no-op on CPU
  const SafetensorsLayout layout = safetensors_layout(host, metadata);
  DurableFile file(path);
  file.append(layout.header.data(), layout.header.size());
  for (const auto& t : host) file.append(t.tensor.data_ptr(), static_cast<size_t>(t.tensor.numel()) * 4);
  file.finish();
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const size_t size = file_.size();
  SPMD_CHECK(size >= 8, "{}: truncated safetensors file ({} bytes, no header)", path, size);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(file_.data()[i]) << (8 * i);
  SPMD_CHECK(n <= size - 8, "{}: truncated or corrupted safetensors file (header of {} bytes, file of {})", path, n, size);
  data_start_ = 8 + n;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_.data() + 8, file_.data() + 8 + n);
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: corrupted safetensors header: {}", path, e.what()));
  }
  SPMD_CHECK(header.is_object(), "{}: corrupted safetensors header (not an object)", path);
  const uint64_t data_size = size - data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      SPMD_CHECK(it.value().is_object(), "{}: corrupted safetensors header (__metadata__ is not an object)", path);
      for (auto m = it.value().begin(); m != it.value().end(); ++m)
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    try {
      SafetensorsEntry e;
      e.dtype = it.value().at("dtype").get<std::string>();
      e.shape = it.value().at("shape").get<std::vector<int64_t>>();
      auto offsets = it.value().at("data_offsets").get<std::vector<uint64_t>>();
      SPMD_CHECK(offsets.size() == 2, "{}: tensor '{}' has data_offsets {} (expected [begin, end])", path, it.key(),
                 it.value().at("data_offsets").dump());
      e.begin = offsets[0];
      e.end = offsets[1];
      const std::string what = fmt::format("{}: tensor '{}'", path, it.key());
      const int64_t numel = checked_element_count(e.shape, what);
      SPMD_CHECK(e.begin <= e.end && e.end <= data_size, "{}: tensor '{}' ends at byte {} but the file holds {} data "
                 "bytes (truncated?)", path, it.key(), e.end, data_size);
      const int64_t element = e.dtype == "F32" ? 4 : e.dtype == "BF16" || e.dtype == "F16" ? 2 : 0;
      SPMD_CHECK(element == 0 || e.end - e.begin == static_cast<uint64_t>(checked_byte_count(numel, element, what)),
                 "{}: tensor '{}' has {} bytes for shape of {} {} values", path, it.key(), e.end - e.begin, numel,
                 e.dtype);
      entries_[it.key()] = e;
    } catch (const nlohmann::json::exception& ex) {
      throw UsageError(fmt::format("{}: corrupted safetensors entry '{}': {}", path, it.key(), ex.what()));
    }
  }
}

const unsigned char* SafetensorsFile::bytes(const std::string& name) const {
  auto it = entries_.find(name);
  SPMD_CHECK(it != entries_.end(), "{}: has no tensor '{}'", path(), name);
  return file_.data() + data_start_ + it->second.begin;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  SPMD_CHECK(it != entries_.end(), "{}: has no tensor '{}'", path(), name);
  const SafetensorsEntry& e = it->second;
  SPMD_CHECK(e.dtype == "F32", "{}: tensor '{}' has dtype {}, expected F32", path(), name, e.dtype);
  return at::from_blob(const_cast<unsigned char*>(bytes(name)), e.shape, at::kFloat);
}

at::Tensor SafetensorsFile::float_tensor(const std::string& name) const {
  auto it = entries_.find(name);
  SPMD_CHECK(it != entries_.end(), "{}: has no tensor '{}'", path(), name);
  const SafetensorsEntry& e = it->second;
  const at::ScalarType type = e.dtype == "F32"    ? at::kFloat
                              : e.dtype == "BF16" ? at::kBFloat16
                              : e.dtype == "F16"  ? at::kHalf
                                                  : at::kByte;
  SPMD_CHECK(type != at::kByte, "{}: tensor '{}' has dtype {}; expected F32, BF16 or F16", path(), name, e.dtype);
  SPMD_CHECK(reinterpret_cast<uintptr_t>(bytes(name)) % at::elementSize(type) == 0,
             "{}: tensor '{}' is not aligned to its {}-byte elements", path(), name, at::elementSize(type));
  return at::from_blob(const_cast<unsigned char*>(bytes(name)), e.shape, type);
}

}  // namespace spmd
