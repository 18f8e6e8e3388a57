// Process running with a deadline for the tests that exercise the real binaries.
#include "test_support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace spmd::test {

RunningProcess start_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);  // own process group, so a timeout kills everything it started
    dup2(pipe_fds[1], 1);
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(pipe_fds[1]);
  return {pid, pipe_fds[0]};
}

ProcessResult finish_process(RunningProcess& process, double timeout_s) {
  const pid_t pid = process.pid;
  ProcessResult result;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buffer[4096];
  bool open = true;
  while (open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      break;
    }
    pollfd pfd{process.output_fd, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 200)));
    if (ready > 0) {
      ssize_t n = read(process.output_fd, buffer, sizeof buffer);
      if (n <= 0) open = false;
      else result.output.append(buffer, static_cast<size_t>(n));
    }
  }
  if (result.timed_out) kill(-pid, SIGKILL);
  close(process.output_fd);
  process.output_fd = -1;
  int status = 0;
  // The pipe closed; the child may still be exiting. Wait, but never past the deadline + 10 s.
  auto hard_deadline = deadline + std::chrono::seconds(10);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > hard_deadline) {
      kill(-pid, SIGKILL);
      result.timed_out = true;
      waitpid(pid, &status, 0);
      break;
    }
    usleep(10000);
  }
  kill(-pid, SIGKILL);  // nothing the test started may outlive it
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env, double timeout_s) {
  RunningProcess process = start_process(argv, env);
  return finish_process(process, timeout_s);
}

std::vector<int> child_pids(int pid) {
  std::vector<int> children;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    auto close_paren = line.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(line.substr(close_paren + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid && state != "Z") children.push_back(std::stoi(name));
  }
  return children;
}

bool process_alive(int pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto close_paren = line.rfind(')');
  return close_paren == std::string::npos || line.substr(close_paren + 2, 1) != "Z";
}

std::string binary_path(const std::string& name) { return std::string(SPMD_BINARY_DIR) + "/app/" + name; }

std::string source_path(const std::string& relative) {
  return std::string(SPMD_SOURCE_DIR) + "/" + relative;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "spmd-test-XXXXXX").string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<ProcessResult> run_processes(const std::vector<std::vector<std::string>>& argvs,
                                         const std::vector<std::map<std::string, std::string>>& envs,
                                         double timeout_s) {
  std::vector<ProcessResult> results(argvs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < argvs.size(); ++i)
    threads.emplace_back([&, i] { results[i] = run_process(argvs[i], envs[i], timeout_s); });
  for (auto& t : threads) t.join();
  return results;
}

void write_token_file(const std::string& path, int64_t count, int vocab, uint64_t seed) {
  // Words of a small random lexicon separated by token 0: a language with something to learn.
  std::vector<uint16_t> tokens;
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  std::vector<std::vector<uint16_t>> lexicon(40);
  for (auto& word : lexicon) {
    int len = 2 + static_cast<int>(next() % 5);
    for (int k = 0; k < len; ++k) word.push_back(static_cast<uint16_t>(1 + next() % static_cast<uint32_t>(vocab - 1)));
  }
  while (static_cast<int64_t>(tokens.size()) < count) {
    const auto& word = lexicon[next() % lexicon.size()];
    tokens.insert(tokens.end(), word.begin(), word.end());
    tokens.push_back(0);
  }
  tokens.resize(static_cast<size_t>(count));
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void write_file(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void check_failed_with(const ProcessResult& r, int exit_code, const std::string& reason) {
  CHECK_MESSAGE(!r.timed_out, "killed at the test's deadline (a hang), not a failure of its own:\n" << r.output);
  CHECK_MESSAGE(r.exit_code == exit_code, "exit " << r.exit_code << ", expected " << exit_code << ":\n" << r.output);
  CHECK_MESSAGE(r.output.find(reason) != std::string::npos, "the output does not say \"" << reason << "\":\n" << r.output);
}

}  // namespace spmd::test
