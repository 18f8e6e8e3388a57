// spmd-inspect's one-line answer to "will it fit?": against a device size when one is given,
// otherwise which memory term dominates and which setting would cut it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "config/config.h"
#include "inspect/memory_estimate.h"

namespace spmd {

// "80GiB", "16 GB", "512MiB", "1e9": bytes. UsageError naming `option` when malformed.
int64_t parse_byte_size(const std::string& text, const std::string& option);

// The term that dominates `e`: "parameters", "gradients", "optimizer state", "activations" or
// "FSDP working set".
std::string dominant_term(const MemoryEstimate& e);

// "fits in 80 GiB per device (needs 1.9 GiB, 2%)", "does not fit in 16 GiB per device: needs
// 20.3 GiB; ..." or, without a device size, "largest term: ..."; always with the settings that would
// shrink the largest term.
std::string memory_verdict(const MemoryEstimate& e, const Config& config, std::optional<int64_t> device_bytes);

}  // namespace spmd
