// TensorBoard scalars: one event file per run (events.out.tfevents.<unix time>.<host>), records
// appended as training goes. Records are buffered and written whole by flush(), so the file only
// ever holds complete records and a killed run leaves everything up to its last flush readable.
// The one translation unit that uses protobuf (libtorch wheels ship their own copy).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spmd {

class TensorBoardWriter {
 public:
  // Creates the file in `dir` (a new one per run: a resumed run adds a file, TensorBoard joins
  // them) and writes the file_version event. RuntimeError naming the path if it cannot.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();  // flushes what is buffered; never throws
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` holding a scalar per (tag, value); buffered, flushed at least once a minute.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  void flush();  // RuntimeError naming the path on a failed write
  const std::string& path() const { return path_; }

 private:
  void append_event(const std::string& serialized_event);

  int fd_ = -1;
  std::string path_;
  std::string pending_;  // framed records not yet written
  std::chrono::steady_clock::time_point last_flush_;
};

}  // namespace spmd
