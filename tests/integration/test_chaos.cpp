// Chaos with asynchronous checkpoints, as real processes: a 4-rank run saving in the background
// every few steps under --max-restarts is killed with SIGKILL ten times (a seeded random rank at a
// seeded random moment; slow writes keep saves in flight, so kills land while checkpoints are
// being written and committed) and ends with the uninterrupted run's losses bit for bit, no process
// left, no temporary directory left and checkpoint.keep honoured. SIGTERM to the launcher while a
// write is pending stops every rank within 30 s with the write complete or discarded whole.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "training_fixture.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {
using Clock = std::chrono::steady_clock;

std::vector<std::string> chaos_settings(const std::string& ck, int steps) {
  std::vector<std::string> a{"--set", "train.steps=" + std::to_string(steps), "--set", "train.decay_steps=" + std::to_string(steps),
                             "--set", "train.eval_every=0", "--set", "runtime.timeout_s=20",
                             "--set", "checkpoint.dir=" + ck, "--set", "checkpoint.every=4",
                             "--set", "checkpoint.keep=2", "--set", "checkpoint.async=true"};
  auto mesh = mesh_args(test_mesh("hybrid-4x2"));
  a.insert(a.end(), mesh.begin(), mesh.end());
  a.insert(a.end(), {"--set", "mesh.shape=[2,2]"});
  return a;
}

size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The launcher's four workers once they are all up and the run has logged a step since `lines`
// (so that every kill lets it progress); empty when the launcher has finished or 60 s passed.
std::vector<int> running_workers(int launcher, const std::string& metrics, size_t lines) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline && process_alive(launcher)) {
    std::vector<int> workers = child_pids(launcher);
    if (workers.size() == 4 && count_lines(metrics) > lines) return workers;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

// How many restarts came while a save was in flight: rank 0 had said "checkpoint of step N: ...
// writing in the background" and not yet "checkpoint .../step_0000000N written in" (a save's report
// comes after the next one starts, so each step is tracked on its own).
int kills_during_a_save(const std::string& output) {
  int count = 0;
  std::set<long> pending;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (const auto at = line.find("checkpoint of step "); at != std::string::npos && line.find("background") != std::string::npos)
      pending.insert(std::stol(line.substr(at + 19)));
    else if (const auto dir = line.find("/step_"); dir != std::string::npos && line.find(" written in ") != std::string::npos)
      pending.erase(std::stol(line.substr(dir + 6)));
    else if (line.find("restart ") != std::string::npos && line.find(" after rank ") != std::string::npos) {
      count += pending.empty() ? 0 : 1;
      pending.clear();
    }
  }
  return count;
}

std::vector<std::string> leftovers(const std::string& ck) {
  std::vector<std::string> tmp;
  for (const auto& e : fs::recursive_directory_iterator(ck))
    if (e.path().filename().string().find(".tmp") != std::string::npos) tmp.push_back(e.path().string());
  return tmp;
}
}  // namespace

TEST_CASE("chaos: ten SIGKILLs of random ranks during async saves, and the run ends with the uninterrupted losses") {
  TinyRun run;
  constexpr int kSteps = 120, kKills = 10;
  const Curve reference = train(run, run.dir.file("calm"), chaos_settings(run.dir.file("ck-calm"), kSteps));
  REQUIRE(reference.loss.size() == kSteps);

  const std::string out = run.dir.file("chaos"), ck = run.dir.file("ck"), metrics = out + "/metrics.jsonl";
  std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out,
                                "--max-restarts", std::to_string(kKills)};
  const auto s = chaos_settings(ck, kSteps);
  argv.insert(argv.end(), s.begin(), s.end());
  RunningProcess launcher = start_process(argv, {{"SPMD_TEST_HOOKS", "slow_save_write=300"}});
  std::mt19937_64 rng(0xc4a05);  // the kills' ranks and moments: printed, so a failure replays
  std::set<int> seen;
  int kills = 0;
  for (size_t lines = 0; kills < kKills;) {
    const std::vector<int> workers = running_workers(launcher.pid, metrics, lines);
    if (workers.empty()) break;
    seen.insert(workers.begin(), workers.end());
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));
    const int victim = workers[rng() % workers.size()];
    lines = count_lines(metrics);
    MESSAGE("kill " << kills + 1 << ": pid " << victim << " after " << lines << " logged steps");
    kill(victim, SIGKILL);
    ++kills;
  }
  const ProcessResult r = finish_process(launcher, 600);
  CHECK(kills == kKills);
  const int mid_save = kills_during_a_save(r.output);
  MESSAGE(mid_save << " of " << kills << " kills landed while a checkpoint was being written or committed");
  CHECK(mid_save >= kKills / 2);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  for (int pid : seen) CHECK_MESSAGE(!process_alive(pid), "pid " << pid << " is still running");
  // The logged curve is the calm run's, bit for bit, each step once.
  const Curve chaos = read_metrics(metrics);
  REQUIRE(chaos.loss.size() == reference.loss.size());
  for (size_t i = 0; i < reference.loss.size(); ++i) {
    CAPTURE(i);
    CHECK(chaos.loss[i] == reference.loss[i]);
  }
  CHECK(leftovers(ck).empty());
  int complete = 0;
  for (const auto& e : fs::directory_iterator(ck)) complete += fs::exists(e.path() / "index.json") ? 1 : 0;
  CHECK(complete == 2);  // checkpoint.keep
}

TEST_CASE("chaos: SIGTERM while a write is pending stops every rank within 30 s, the save complete or discarded whole") {
  TinyRun run;
  const std::string out = run.dir.file("o"), ck = run.dir.file("ck");
  std::vector<std::string> argv{binary_path("spmd-train"), "--config", run.config, "--set", "output.dir=" + out};
  const auto s = chaos_settings(ck, 100000);
  argv.insert(argv.end(), s.begin(), s.end());
  RunningProcess launcher = start_process(argv, {{"SPMD_TEST_HOOKS", "slow_save_write=2000"}});
  const std::vector<int> workers = running_workers(launcher.pid, out + "/metrics.jsonl", 5);  // past step 4's save
  REQUIRE(workers.size() == 4);
  const auto start = Clock::now();
  kill(launcher.pid, SIGTERM);
  const ProcessResult r = finish_process(launcher, 60);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  MESSAGE("stopped " << took << " s after SIGTERM");
  check_failed_with(r, 143, "stopping after step");
  CHECK(took < 30);
  for (int pid : workers) CHECK_FALSE(process_alive(pid));
  CHECK(leftovers(ck).empty());
  for (const auto& e : fs::directory_iterator(ck)) {  // every step directory left is a whole checkpoint
    CAPTURE(e.path().string());
    CHECK(fs::exists(e.path() / "index.json"));
  }
}
