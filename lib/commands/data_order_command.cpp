// The data order report (see data_order_command.h).
#include "commands/data_order_command.h"

#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/yaml_reader.h"
#include "data/loader.h"
#include "train/training_data.h"
#include "util/error.h"

namespace spmd {

StepRange parse_step_range(const std::string& text) {
  const size_t colon = text.find(':');
  const std::optional<int64_t> first = parse_int(text.substr(0, colon));
  const std::optional<int64_t> last = colon == std::string::npos ? first : parse_int(text.substr(colon + 1));
  SPMD_CHECK(first && last && *first >= 1 && *first <= *last,
             "--steps {}: expected A:B with 1 <= A <= B (steps are numbered from 1, B included), or one step A", text);
  return {*first, *last};
}

void print_data_order(const Config& config, const StepRange& steps, bool json) {
  std::unique_ptr<DataLoader> loader = make_training_loader(config, 0, 1, /*prefetch=*/0);
  const int64_t batch = config.data.batch_size;
  LoaderState start = loader->state();  // step 1's; moved to step `first`'s
  if (start.is_blend()) start.blend.samples = (steps.first - 1) * batch;
  else start = advance(start, (steps.first - 1) * batch, loader->num_windows());
  loader->restore(start);
  const std::vector<std::string>& names = loader->source_names();
  if (!json) fmt::print("{:>8} {:>6}  {:<16} {}\n", "step", "row", "source", "index");
  for (int64_t step = steps.first; step <= steps.last; ++step) {
    const Batch b = loader->next();
    for (int64_t r = 0; r < b.rows; ++r) {
      const std::string& source = names.empty() ? std::string("train") : names[static_cast<size_t>(b.source_ids[r])];
      if (json)
        fmt::print("{}\n", nlohmann::json{{"step", step}, {"row", r}, {"source", source}, {"index", b.source_samples[r]}}.dump());
      else
        fmt::print("{:>8} {:>6}  {:<16} {}\n", step, r, source, b.source_samples[r]);
    }
  }
  std::fflush(stdout);
}

}  // namespace spmd
