// spmd-inspect's pipeline section: what each stage holds, its memory, the bubble; text and JSON.
// Empty (text) and null (JSON) without pipeline stages (no `layers` rule, or one stage).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "parallel/layout.h"

namespace spmd {

std::string pipeline_text(const Config& config, const ModelLayout& layout);
nlohmann::json pipeline_json(const Config& config, const ModelLayout& layout);

// What `stage` holds: "h.0-h.1 + embeddings (wte, wpe)", "h.2-h.3 + ln_f, head (wte tied)".
std::string stage_contents(const ModelLayout& layout, int64_t stage);

}  // namespace spmd
