// metrics.jsonl writer.
#include "monitor/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "monitor/tensorboard_writer.h"
#include "util/durable_file.h"
#include "util/error.h"

namespace spmd {

namespace {
// The lines of `path` for steps 1..`done` (the steps a resumed run already has); a torn last line
// (a killed writer) is dropped.
std::string lines_up_to_step(const std::string& path, int64_t done) {
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() <= done)
      kept += line + "\n";
  }
  return kept;
}

// The metrics.jsonl keys that TensorBoard shows as scalars (tags of the same names), besides the
// benchmark scores eval/<task>/<metric>, a blend's val_loss/<source> and experts/layerN/load_*.
const char* const kScalarKeys[] = {"loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "aux_loss"};

bool is_eval_key(const std::string& key) { return key.rfind("eval/", 0) == 0; }
}  // namespace

MetricsLog::MetricsLog(const std::string& output_dir, int64_t resumed_step) : path_(output_dir + "/metrics.jsonl") {
  std::error_code ec;
  std::filesystem::create_directories(output_dir, ec);
  SPMD_CHECK(!ec, "output.dir '{}' cannot be created: {}", output_dir, ec.message());
  if (resumed_step >= 0) write_file_durably(path_, lines_up_to_step(path_, resumed_step));
  file_ = std::fopen(path_.c_str(), resumed_step >= 0 ? "a" : "w");
  SPMD_CHECK(file_ != nullptr, "output.dir: cannot write {}: {}", path_, std::strerror(errno));
  events_ = std::make_unique<TensorBoardWriter>(output_dir);
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw RuntimeError(fmt::format("writing {} failed: {}", path_, std::strerror(errno)));
  std::vector<std::pair<std::string, double>> scalars;
  for (const char* key : kScalarKeys)
    if (auto it = record.find(key); it != record.end() && it->is_number()) scalars.emplace_back(key, it->get<double>());
  bool scored = false;
  for (const auto& [key, value] : record.items())
    if (is_eval_key(key) && value.is_number()) scalars.emplace_back(key, value.get<double>()), scored = true;
  for (const auto& [key, value] : record.items())  // a blend's per-source validation losses, experts' loads
    if ((key.rfind("val_loss/", 0) == 0 || key.rfind("experts/", 0) == 0) && value.is_number())
      scalars.emplace_back(key, value.get<double>());
  events_->add_scalars(record.at("step").get<int64_t>(), scalars);
  if (record.contains("val_loss") || scored) events_->flush();  // what TensorBoard shows survives a crash from here on
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
}

}  // namespace spmd
