// Rank 0's outputs: one JSON line per logged step in output.dir/metrics.jsonl, and a progress line.
#pragma once
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace spmd {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& output_dir);  // creates the dir; UsageError if it cannot
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& record);  // one line, flushed

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

std::string format_duration(double seconds);  // "3m12s"

}  // namespace spmd
