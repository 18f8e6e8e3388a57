// Writability probes for the run's output directories.
#include "launch/output_dirs.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace spmd {

namespace {
void check_writable(const std::string& key, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  SPMD_CHECK(!ec, "{} '{}' cannot be created: {}", key, dir, ec.message());
  std::string probe = dir + "/.write-probe-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(probe.c_str(), "w");
  SPMD_CHECK(f != nullptr, "{} '{}' is not writable: {}", key, dir, std::strerror(errno));
  std::fclose(f);
  std::remove(probe.c_str());
}
}  // namespace

void check_output_dirs(const Config& config) {
  check_writable("output.dir", config.output.dir);
  if (!config.checkpoint.dir.empty()) check_writable("checkpoint.dir", config.checkpoint.dir);
}

}  // namespace spmd
