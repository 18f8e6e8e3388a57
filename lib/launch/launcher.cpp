// fork/exec workers, multiplex their output, watch for deaths and signals, tear down on failure.
#include "launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "comm/launch_env.h"
#include "kernels/cpu/blas_library.h"
#include "util/error.h"

namespace spmd {

namespace {
volatile std::sig_atomic_t g_signal_count = 0;
volatile std::sig_atomic_t g_last_signal = 0;

void on_signal(int sig) {
  g_last_signal = sig;
  g_signal_count = g_signal_count + 1;
}

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;               // its stdout+stderr
  std::string partial;       // an unfinished line
  std::deque<std::string> tail;  // last lines, shown if it fails
  bool exited = false;
  int status = 0;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

// Everything a worker needs from the launcher, fixed before the first fork.
struct WorkerEnv {
  int world = 1;
  int port = 0;
  int threads = 1;
  std::optional<std::string> openblas_core;
};

// In the child: own process group (a terminal's Ctrl-C reaches the launcher only, which forwards
// it once), death with the launcher, output into the pipe, the torchrun variables, then exec.
[[noreturn]] void exec_worker(const LaunchOptions& options, const WorkerEnv& env, int local, int rank, int pipe_fd,
                              const std::vector<std::string>& argv) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  dup2(pipe_fd, 1);
  dup2(pipe_fd, 2);
  close(pipe_fd);
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(env.world).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node).c_str(), 1);
  setenv("MASTER_ADDR", options.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(env.port).c_str(), 1);
  setenv("OMP_NUM_THREADS", std::to_string(env.threads).c_str(), 1);
  setenv("SPMD_THREADS_PER_RANK", std::to_string(env.threads).c_str(), 1);
  if (env.openblas_core) setenv("OPENBLAS_CORETYPE", env.openblas_core->c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv("/proc/self/exe", args.data());
  _exit(127);
}

Worker start_worker(const LaunchOptions& options, const WorkerEnv& env, int local,
                    const std::vector<std::string>& argv) {
  Worker w;
  w.rank = options.node_rank * options.nproc_per_node + local;
  int fds[2];
  if (pipe(fds) != 0) throw RuntimeError("pipe() failed");
  const pid_t pid = fork();
  if (pid < 0) throw RuntimeError("fork() failed");
  if (pid == 0) {
    close(fds[0]);
    exec_worker(options, env, local, w.rank, fds[1], argv);
  }
  close(fds[1]);
  w.pid = pid;
  w.fd = fds[0];
  return w;
}

// Watches the started workers: forwards their lines, forwards signals, and on the first failure
// stops the others (SIGTERM, then SIGKILL after the grace period).
class WorkerPool {
 public:
  WorkerPool(const LaunchOptions& options, int world, std::vector<Worker> workers)
      : options_(options), world_(world), workers_(std::move(workers)) {}

  int run(std::string* failure_out) {
    while (true) {
      forward_signals();
      poll_output();
      if (reap()) break;
      if (tearing_down_ && std::chrono::steady_clock::now() > kill_deadline_) signal_all(SIGKILL);
    }
    for (auto& w : workers_)
      while (w.fd >= 0) drain(w);
    std::fflush(stdout);
    if (!failure_.empty()) fmt::print(stderr, "spmd-train: failed: {}\n", failure_);
    if (failure_out) *failure_out = failure_;
    return exit_code_;
  }

 private:
  void emit(Worker& w, const std::string& line) {
    w.tail.push_back(line);
    if (w.tail.size() > 40) w.tail.pop_front();
    if (w.rank == 0 || options_.verbose)
      fmt::print(options_.output_to_stderr ? stderr : stdout, "{}{}\n",
                 options_.verbose || world_ > 1 ? fmt::format("[rank {}] ", w.rank) : "", line);
  }

  // Reads what the worker wrote; whole lines are emitted, the rest waits for its newline.
  void drain(Worker& w) {
    char buffer[8192];
    const ssize_t n = read(w.fd, buffer, sizeof buffer);
    if (n <= 0) {
      close(w.fd);
      w.fd = -1;
      if (!w.partial.empty()) emit(w, w.partial);
      w.partial.clear();
      return;
    }
    w.partial.append(buffer, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = w.partial.find('\n', start)) != std::string::npos) {
      emit(w, w.partial.substr(start, nl - start));
      start = nl + 1;
    }
    w.partial.erase(0, start);
    std::fflush(stdout);
  }

  void signal_all(int sig) {
    for (auto& w : workers_)
      if (!w.exited) kill(w.pid, sig);
  }

  void tear_down(int sig, std::chrono::milliseconds grace) {
    signal_all(sig);
    tearing_down_ = true;
    kill_deadline_ = std::chrono::steady_clock::now() + grace;
  }

  // The first signal is forwarded; a second one kills at once.
  void forward_signals() {
    if (g_signal_count <= forwarded_signals_) return;
    forwarded_signals_ = g_signal_count;
    const int sig = g_last_signal;
    if (exit_code_ == 0) exit_code_ = 128 + sig;
    if (forwarded_signals_ == 1) {
      fmt::print(stderr, "spmd-train: {} received, stopping the workers\n", strsignal(sig));
      tear_down(sig, std::chrono::seconds(30));
    } else {
      fmt::print(stderr, "spmd-train: second signal, killing the workers\n");
      signal_all(SIGKILL);
    }
  }

  void poll_output() {
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    for (auto& w : workers_)
      if (w.fd >= 0) {
        fds.push_back({w.fd, POLLIN, 0});
        owners.push_back(&w);
      }
    if (fds.empty()) {
      usleep(20000);
      return;
    }
    const int ready = poll(fds.data(), fds.size(), 100);
    for (size_t i = 0; ready > 0 && i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) drain(*owners[i]);
  }

  // Collects exited workers; a failure (outside a teardown) stops the others. True when all exited.
  bool reap() {
    bool all_exited = true;
    for (auto& w : workers_) {
      if (!w.exited && waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
        w.exited = true;
        const bool ok = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0;
        if (!ok && !tearing_down_) on_failure(w);
      }
      all_exited = all_exited && w.exited;
    }
    return all_exited;
  }

  void on_failure(Worker& w) {
    while (w.fd >= 0) drain(w);  // its last words
    failure_ = fmt::format("rank {} (pid {}) {}", w.rank, w.pid, describe_status(w.status));
    exit_code_ = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 2 ? 2 : 1;
    fmt::print(stderr, "spmd-train: {}; stopping the other ranks\n", failure_);
    if (w.rank != 0 && !options_.verbose)
      for (const auto& line : w.tail) fmt::print(stderr, "[rank {}] {}\n", w.rank, line);
    tear_down(SIGTERM, std::chrono::milliseconds(static_cast<int64_t>(options_.grace_s * 1000)));
  }

  const LaunchOptions& options_;
  const int world_;
  std::vector<Worker> workers_;
  int exit_code_ = 0;
  std::string failure_;
  int forwarded_signals_ = 0;
  bool tearing_down_ = false;
  std::chrono::steady_clock::time_point kill_deadline_{};
};
}  // namespace

int threads_per_rank(int64_t configured, int local_ranks) {
  if (configured > 0) return static_cast<int>(configured);
  unsigned cores = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(cores == 0 ? 1 : cores) / std::max(1, local_ranks));
}

namespace {
bool can_listen_on(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);  // as rank 0's store will bind it
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && listen(fd, 1) == 0;
  close(fd);
  return free;
}
}  // namespace

int pick_free_port() {
  std::random_device seed;
  std::mt19937 pick(seed());
  std::uniform_int_distribution<int> port(kDerivedPortFirst, kDerivedPortEnd - 1);
  for (int attempt = 0; attempt < 1000; ++attempt)
    if (const int p = port(pick); can_listen_on(p)) return p;
  throw RuntimeError(fmt::format("no free port in [{}, {}) after 1000 tries: pass --master-port", kDerivedPortFirst,
                                 kDerivedPortEnd));
}

int launch_workers(const LaunchOptions& options, const std::vector<std::string>& argv, std::string* failure_out) {
  WorkerEnv env;
  env.world = options.nproc_per_node * options.nnodes;
  env.port = options.master_port;
  if (env.port == 0) {
    SPMD_CHECK(options.nnodes == 1, "--master-port is required with --nnodes > 1 (every node must agree on it)");
    env.port = pick_free_port();
  }
  env.threads = threads_per_rank(options.threads_per_rank, options.nproc_per_node);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  // OpenBLAS reads OPENBLAS_CORETYPE when it loads: a generic (SSE) core on an AVX2/AVX-512 CPU,
  // detected here or forced by the environment, is replaced for the workers before they start.
  env.openblas_core = kernels::cpu::openblas_coretype_for_workers();
  // The BLAS choice is timed here once, before the workers start, so that they all find it made.
  if (!env.openblas_core) kernels::cpu::blas_description();
  std::vector<Worker> workers;
  for (int local = 0; local < options.nproc_per_node; ++local)
    workers.push_back(start_worker(options, env, local, argv));
  return WorkerPool(options, env.world, std::move(workers)).run(failure_out);
}

}  // namespace spmd
