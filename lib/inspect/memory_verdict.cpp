// The fit verdict and the knobs that shrink each memory term.
#include "inspect/memory_verdict.h"

#include <cctype>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mesh/render.h"
#include "util/error.h"

namespace spmd {

namespace {
// Settings that cut a term, given what the config already does.
std::string remedy(const std::string& term, const Config& config, const MemoryEstimate& e) {
  if (term == "activations") {
    std::vector<std::string> ways;
    if (config.runtime.remat != Remat::kFull) ways.push_back("runtime.remat: full");
    if (e.sequence_parallel_axes.empty()) ways.push_back("sequence parallelism ([seq, model] with a model axis)");
    ways.push_back(fmt::format("more train.microbatches (now {})", config.train.microbatches));
    ways.push_back("a smaller data.batch_size");
    return fmt::format("{}", fmt::join(ways, ", "));
  }
  if (term == "FSDP working set") return "fewer FSDP-sharded dims or runtime.fsdp_prefetch: false";
  if (term == "gradients sent back")
    return fmt::format("fewer train.microbatches (now {}) or a smaller data.batch_size", config.train.microbatches);
  if (term == "recomputed block")
    return "a smaller data.batch_size or more train.microbatches (runtime.remat: none keeps it for every block)";
  if (term == "backward working set")
    return "a smaller data.batch_size, more train.microbatches, or tensor parallelism (heads, mlp on a model axis)";
  if (term == "optimizer state") return "FSDP (map embed to the batch's mesh axis) shards AdamW's m and v";
  return "FSDP (map embed to the batch's mesh axis) or tensor parallelism (heads, mlp, vocab on a model axis)";
}
}  // namespace

int64_t parse_byte_size(const std::string& text, const std::string& option) {
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  unit.erase(0, unit.find_first_not_of(' '));
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::pair<const char*, double> units[] = {
      {"", 1}, {"b", 1}, {"kib", 1024.0}, {"mib", 1024.0 * 1024}, {"gib", 1024.0 * 1024 * 1024},
      {"tib", 1024.0 * 1024 * 1024 * 1024}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}};
  for (const auto& [name, scale] : units)
    if (used > 0 && unit == name && number > 0 && std::isfinite(number)) return static_cast<int64_t>(number * scale);
  throw UsageError(fmt::format("{} '{}': expected a positive size such as 80GiB, 16GB or 512MiB", option, text));
}

std::string dominant_term(const MemoryEstimate& e) {
  const std::pair<const char*, int64_t> terms[] = {{"parameters", e.params}, {"gradients", e.grads},
                                                   {"optimizer state", e.optimizer},
                                                   {"FSDP working set", e.fsdp_gathered},
                                                   {"gradients sent back", e.gradient_sends},
                                                   {"backward working set", e.backward_working_set},
                                                   {"recomputed block", e.recompute},
                                                   {"activations", e.activations}};
  const auto* best = &terms[0];
  for (const auto& t : terms)
    if (t.second > best->second) best = &t;
  return best->first;
}

std::string memory_verdict(const MemoryEstimate& e, const Config& config, std::optional<int64_t> device_bytes) {
  const std::string term = dominant_term(e);
  const int64_t total = e.total();
  const std::string cut = fmt::format("the largest term is {}; to cut it: {}", term, remedy(term, config, e));
  if (!device_bytes)
    return fmt::format("needs {} per device; {}", human_bytes(total), cut);
  if (total <= *device_bytes)
    return fmt::format("fits in {} per device (needs {}, {:.0f}%)", human_bytes(*device_bytes), human_bytes(total),
                       100.0 * static_cast<double>(total) / static_cast<double>(*device_bytes));
  return fmt::format("does not fit in {} per device: needs {}; {}", human_bytes(*device_bytes), human_bytes(total),
                     cut);
}

}  // namespace spmd
