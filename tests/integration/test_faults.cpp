// Distributed failures as real processes: a rank killed, the launcher signalled, a rank that
// never arrives, an unreachable master, a NaN, unwritable outputs, bad arguments. Nothing hangs,
// nothing is left running, and the exit codes and messages say what happened.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "ports.h"
#include "skip.h"
#include "comm/backend.h"
#include "training_fixture.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return n;
}

// Waits (at most 60 s) until the run has logged `lines` steps.
void wait_for_steps(const std::string& metrics, size_t lines) {
  auto start = Clock::now();
  while (count_lines(metrics) < lines && seconds_since(start) < 60) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(count_lines(metrics) >= lines);
}

std::vector<std::string> long_run(const TinyRun& run, const std::string& out) {
  auto a = std::vector<std::string>{binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out,
                                    "--set", "train.steps=100000", "--set", "train.eval_every=0",
                                    "--set", "runtime.timeout_s=20"};
  auto mesh = mesh_args(test_mesh("hybrid-4x2"));
  a.insert(a.end(), mesh.begin(), mesh.end());
  a.insert(a.end(), {"--set", "mesh.shape=[2,2]"});
  return a;
}

}  // namespace

TEST_CASE("faults: kill -9 of one of 4 ranks stops the run within 60 s, naming the rank, nothing left") {
  TinyRun run;
  const std::string out = run.dir.file("out");
  RunningProcess launcher = start_process(long_run(run, out));
  wait_for_steps(out + "/metrics.jsonl", 3);
  std::vector<int> workers = child_pids(launcher.pid);
  REQUIRE(workers.size() == 4);
  const int victim = workers[2];
  auto start = Clock::now();
  kill(victim, SIGKILL);
  ProcessResult r = finish_process(launcher, 60);
  const double took = seconds_since(start);
  MESSAGE("launcher exited " << took << " s after the kill");
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code != 0);
  CHECK(took < 60);
  CHECK_MESSAGE(r.output.find("(pid " + std::to_string(victim) + ") was killed by signal 9") != std::string::npos, r.output);
  for (int pid : workers) CHECK_FALSE(process_alive(pid));
}

TEST_CASE("faults: SIGTERM to the launcher checkpoints, stops every rank within 30 s, exits 143") {
  TinyRun run;
  const std::string out = run.dir.file("out");
  auto argv = long_run(run, out);
  argv.insert(argv.end(), {"--set", "checkpoint.dir=" + run.dir.file("ck"), "--set", "checkpoint.every=100000"});
  RunningProcess launcher = start_process(argv);
  wait_for_steps(out + "/metrics.jsonl", 3);
  std::vector<int> workers = child_pids(launcher.pid);
  REQUIRE(workers.size() == 4);
  auto start = Clock::now();
  kill(launcher.pid, SIGTERM);
  ProcessResult r = finish_process(launcher, 30);
  MESSAGE("all stopped " << seconds_since(start) << " s after SIGTERM");
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 143);
  CHECK_MESSAGE(r.output.find("checkpoint " + run.dir.file("ck") + "/step_") != std::string::npos, r.output);
  bool found = false;
  for (const auto& e : fs::directory_iterator(run.dir.file("ck")))
    found = found || fs::exists(e.path() / "index.json");
  CHECK(found);
  for (int pid : workers) CHECK_FALSE(process_alive(pid));
}

TEST_CASE("faults: externally launched ranks with one missing each exit non-zero within the timeout") {
  TinyRun run;
  const std::string port = unused_port();
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::map<std::string, std::string>> envs;
  for (int rank = 0; rank < 3; ++rank) {  // rank 3 never starts
    auto argv = long_run(run, run.dir.file("out"));
    argv.insert(argv.end(), {"--set", "runtime.timeout_s=5"});
    argvs.push_back(argv);
    envs.push_back({{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", port}});
  }
  auto start = Clock::now();
  auto results = run_processes(argvs, envs, 60);
  MESSAGE("ranks gave up after " << seconds_since(start) << " s");
  for (const auto& r : results) {
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.output.find("runtime error") != std::string::npos, r.output);
    CHECK(r.output.find("frame #") == std::string::npos);  // a message, not a C++ backtrace
  }
  CHECK(seconds_since(start) < 40);
}

TEST_CASE("faults: an unreachable master and a port in use are clear errors") {
  TinyRun run;
  SUBCASE("no master listening") {
    auto argv = long_run(run, run.dir.file("out"));
    argv.insert(argv.end(), {"--set", "runtime.timeout_s=3"});
    auto r = run_process(argv, {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", unused_port()}}, 30);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.output.find("rendezvous with 127.0.0.1") != std::string::npos, r.output);
  }
  SUBCASE("the master's port is taken") {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(listen(fd, 1) == 0);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    auto argv = long_run(run, run.dir.file("out"));
    argv.insert(argv.end(), {"--set", "runtime.timeout_s=3", "--master-port", std::to_string(ntohs(addr.sin_port))});
    auto r = run_process(argv, {}, 60);
    close(fd);
    CHECK(r.exit_code == 1);
    CHECK_MESSAGE(r.output.find("rendezvous with 127.0.0.1:" + std::to_string(ntohs(addr.sin_port))) != std::string::npos, r.output);
    CHECK_MESSAGE(r.output.find("is taken on this host: pass a free one") != std::string::npos, r.output);
  }
}

TEST_CASE("faults: a NaN loss stops the run naming the step, or is skipped when asked") {
  TinyRun run;
  auto stopped = run_train(run, run.dir.file("o1"), {}, "nan_loss@3");
  CHECK(stopped.exit_code == 1);
  CHECK_MESSAGE(stopped.output.find("step 3: non-finite loss") != std::string::npos, stopped.output);
  auto skipped = run_train(run, run.dir.file("o2"), {"--set", "train.skip_nonfinite=true"}, "nan_loss@3");
  CHECK_MESSAGE(skipped.exit_code == 0, skipped.output);
  CHECK(skipped.output.find("step 3: non-finite loss or gradient; step skipped") != std::string::npos);
  CHECK(count_lines(run.dir.file("o2/metrics.jsonl")) == 11);  // 12 steps, one skipped
}

TEST_CASE("faults: unwritable output and checkpoint dirs are reported before training (exit 2)") {
  TinyRun run;
  write_file(run.dir.file("a-file"), "x");
  auto out = run_train(run, run.dir.file("a-file") + "/out", {});
  CHECK(out.exit_code == 2);
  CHECK_MESSAGE(out.output.find("output.dir '" + run.dir.file("a-file") + "/out' cannot be created") != std::string::npos, out.output);
  CHECK(out.output.find("step ") == std::string::npos);
  auto ck = run_train(run, run.dir.file("o"), {"--set", "checkpoint.dir=" + run.dir.file("a-file") + "/ck"});
  CHECK(ck.exit_code == 2);
  CHECK(ck.output.find("checkpoint.dir") != std::string::npos);
}

TEST_CASE("faults: bad command-line arguments exit 2") {
  TinyRun run;
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--nproc", "-3"}, {"--bogus"}, {"--nproc", "3"}, {"--master-port", "70000"}, {"--set", "novalue"}}) {
    CAPTURE(bad[0]);
    auto r = run_train(run, run.dir.file("o"), bad);
    CHECK(r.exit_code == 2);
    // The message names the argument (or its value), not something else that happened to fail.
    CHECK_MESSAGE((r.output.find(bad[0]) != std::string::npos || r.output.find(bad.back()) != std::string::npos),
                  r.output);
    CHECK(r.output.find("terminate called") == std::string::npos);
  }
  auto missing = run_process({binary_path("spmd-train")});
  CHECK(missing.exit_code == 2);
  if (spmd::visible_gpus() > 0) {
    SPMD_SKIP("a GPU is visible, so runtime.device=cuda is legal here");
  }
  const std::string why = spmd::built_with_cuda() ? "no GPU visible" : "built without CUDA";
  for (const char* setting : {"runtime.device=cuda", "runtime.backend=nccl"}) {
    CAPTURE(setting);
    auto r = run_train(run, run.dir.file("o"), {"--set", setting, "--set", "mesh.shape=[2,2]"});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find(why) != std::string::npos, r.output);
    CHECK(r.output.find("[rank") == std::string::npos);  // refused before any process started
  }
}

TEST_CASE("faults: bad data files stop spmd-train with exit 2 naming the file") {
  TinyRun run;
  SUBCASE("token id beyond the vocabulary") {
    write_token_file(run.dir.file("big-vocab.bin"), 5000, 200, 3);
    auto r = run_train(run, run.dir.file("o"), {"--set", "data.train=" + run.dir.file("big-vocab.bin")});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find(run.dir.file("big-vocab.bin")) != std::string::npos, r.output);
  }
  SUBCASE("missing file, on a multi-process mesh") {
    auto args = mesh_args(test_mesh("hybrid-4x2"));
    args.insert(args.end(), {"--set", "data.val=" + run.dir.file("absent.bin")});
    auto r = run_train(run, run.dir.file("o"), args);
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find(run.dir.file("absent.bin")) != std::string::npos, r.output);
  }
  SUBCASE("truncated uint16 file") {
    write_file(run.dir.file("odd.bin"), std::string(4001, 'a'));
    auto r = run_train(run, run.dir.file("o"), {"--set", "data.train=" + run.dir.file("odd.bin")});
    CHECK(r.exit_code == 2);
    CHECK_MESSAGE(r.output.find(run.dir.file("odd.bin")) != std::string::npos, r.output);
  }
}
