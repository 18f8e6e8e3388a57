// Test helpers: run a program as a real process with a deadline, temporary directories, paths.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace spmd::test {

struct ProcessResult {
  int exit_code = -1;     // exit status, or 128 + signal
  bool timed_out = false; // killed at the deadline (the whole process group)
  std::string output;     // stdout and stderr interleaved
};

// A process started in its own process group, whose output is collected when it is finished.
struct RunningProcess {
  int pid = -1;
  int output_fd = -1;
};
RunningProcess start_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
// Collects output until the process exits or `timeout_s` passes (then its group is killed).
ProcessResult finish_process(RunningProcess& process, double timeout_s);
// Pids whose parent is `pid` (from /proc).
std::vector<int> child_pids(int pid);
bool process_alive(int pid);

// Runs argv[0] (a path) with extra environment variables, killing its process group after
// `timeout_s`. Never hangs.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env = {},
                          double timeout_s = 120);

// A run expected to fail: checks that it ended by itself (not killed at the test's deadline), with
// `exit_code`, and that its output names the reason (`reason`, a substring). A hang that the
// deadline ends, or a failure for another reason, fails the check.
void check_failed_with(const ProcessResult& r, int exit_code, const std::string& reason);

// Path of a built binary (spmd-train, spmd-inspect, ...) and of a file in the source tree.
std::string binary_path(const std::string& name);
std::string source_path(const std::string& relative);

// A fresh empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Runs several processes at once (each like run_process) and waits for all of them.
std::vector<ProcessResult> run_processes(const std::vector<std::vector<std::string>>& argvs,
                                         const std::vector<std::map<std::string, std::string>>& envs,
                                         double timeout_s = 120);

void write_file(const std::string& path, const std::string& contents);
// A nanoGPT-layout token file (uint16) of `count` tokens below `vocab`, with learnable structure.
void write_token_file(const std::string& path, int64_t count, int vocab, uint64_t seed);
std::string read_file(const std::string& path);

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace spmd::test
