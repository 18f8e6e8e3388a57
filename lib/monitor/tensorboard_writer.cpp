// TensorBoard event file writer: Event protos (our tensorboard_event.proto) in TFRecord framing.
#include "monitor/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "monitor/tensorboard_event.pb.h"
#include "monitor/tf_record.h"
#include "util/error.h"

namespace spmd {

namespace {
constexpr auto kFlushInterval = std::chrono::seconds(60);  // TensorBoard's own writer: 120 s

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// TensorFlow's name; the pid is added only when a file of that name already exists (two runs
// started in the same second).
int create_event_file(const std::string& dir, std::string& path) {
  const std::string base = fmt::format("{}/events.out.tfevents.{}.{}", dir, std::time(nullptr), host_name());
  for (const std::string& candidate : {base, fmt::format("{}.{}", base, getpid())}) {
    int fd = open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) {
      path = candidate;
      return fd;
    }
  }
  path = base;
  return -1;
}
}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) : last_flush_(std::chrono::steady_clock::now()) {
  fd_ = create_event_file(dir, path_);
  if (fd_ < 0) throw RuntimeError(fmt::format("cannot create TensorBoard event file {}: {}", path_, std::strerror(errno)));
  tensorboard::Event event;
  event.set_wall_time(wall_time());
  event.set_file_version("brain.Event:2");
  append_event(event.SerializeAsString());
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  try {
    flush();
  } catch (const std::exception&) {  // a destructor must not throw; the run's result stands
  }
  if (fd_ >= 0) close(fd_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  tensorboard::Event event;
  event.set_wall_time(wall_time());
  event.set_step(step);
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  append_event(event.SerializeAsString());
  if (std::chrono::steady_clock::now() - last_flush_ >= kFlushInterval) flush();
}

void TensorBoardWriter::append_event(const std::string& serialized_event) { pending_ += frame_record(serialized_event); }

void TensorBoardWriter::flush() {
  last_flush_ = std::chrono::steady_clock::now();
  size_t done = 0;
  while (done < pending_.size()) {
    const ssize_t n = write(fd_, pending_.data() + done, pending_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw RuntimeError(fmt::format("writing {} failed: {}", path_, std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  pending_.clear();
}

}  // namespace spmd
