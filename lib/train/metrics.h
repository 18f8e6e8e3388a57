// Rank 0's outputs: one JSON line per logged step in output.dir/metrics.jsonl, and a progress line.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace spmd {

class MetricsLog {
 public:
  // Creates the dir (UsageError if it cannot) and starts metrics.jsonl afresh, or, for a run
  // resumed at `resumed_step`, keeps the lines of the steps before it: a restarted job's file
  // then holds every step once.
  explicit MetricsLog(const std::string& output_dir, int64_t resumed_step = -1);
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
