// Rank 0's outputs: one JSON line per logged step in output.dir/metrics.jsonl, its scalars in a
// TensorBoard event file beside it, and a progress line.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace spmd {

class TensorBoardWriter;

class MetricsLog {
 public:
  // Creates the dir (UsageError if it cannot) and starts metrics.jsonl afresh, or, for a run
  // resumed after `resumed_step` steps, keeps the lines of steps 1..resumed_step (lines are numbered
  // as the progress line, from 1): a restarted job's file then holds every step once.
  explicit MetricsLog(const std::string& output_dir, int64_t resumed_step = -1);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // One line, flushed; the TensorBoard event file flushes at evaluations (records with val_loss).
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  std::unique_ptr<TensorBoardWriter> events_;
};

std::string format_duration(double seconds);  // "3m12s"

}  // namespace spmd
