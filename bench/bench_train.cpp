// bench_train: training throughput of a config. Warms up, times N real train_step calls (the same
// build_train_state + train_step the trainer runs), and reports tokens/s, the median step and its
// split (on CUDA also as the device ran it, from events), MFU against a matmul peak measured on the
// spot and, on a GPU it knows, against the spec sheet's dense peak (as llm.c and torchtitan report
// it), the attention ops libtorch dispatched, peak memory per rank and the activations
// the autograd graphs held between forward and backward; with pipeline stages, the measured bubble
// and the activations in flight per stage next to the theory.
//
//   bench_train --config configs/bench/baby.yaml [--set k=v]... [--warmup 5] [--steps 20] [--json out.json]
//   bench_train --config configs/bench/dp2.yaml --nproc 2      # forks 2 ranks like spmd-train
//   RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. bench_train --config ...   # one torchrun rank
//   bench_train --config configs/gpt2-124m.yaml --census h100 [--json out.json]   # census_mode.h
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <CLI/CLI.hpp>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "census_mode.h"
#include "config/config.h"
#include "device_profile.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/kernels.h"
#include "model/params.h"
#include "parallel/layout.h"
#include "parallel/pipeline_schedule.h"
#include "alltoall/token_exchange.h"
#include "comm/backend.h"
#include "comm/launch_env.h"
#include "launch/launcher.h"
#include "launch/preflight_ranks.h"
#include "train/train_state.h"
#include "util/caching_cpu_allocator.h"
#include "util/error.h"
#include "util/guarded_main.h"

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  int warmup = 5;
  int steps = 20;
  int nproc = 0;  // 0: the mesh's size
  int peak_size = 2048;
  bool default_allocator = false;
  std::string json_path;
  std::string trace_path;
  std::string census;  // a GPU: the op census of one step instead of the timing
};

void setup_bench(CLI::App& app, BenchOptions& opt) {
  app.add_option("-c,--config", opt.config_path, "YAML config file")->required();
  app.add_option("--set", opt.overrides, "override a key: dotted.key=YAML_VALUE (repeatable)");
  app.add_option("--warmup", opt.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", opt.steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--nproc", opt.nproc, "ranks to fork on this machine (default: the mesh's size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--peak-size", opt.peak_size, "n of the n^3 matmul (in model.matmul_dtype) that measures the peak")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", opt.json_path, "write the results as JSON here (rank 0)");
  app.add_option("--trace", opt.trace_path,
                 "after the timed steps, profile 3 more with libtorch's profiler into this chrome://tracing "
                 "file (rank 0; per-op times; on CUDA the GPU's kernels too, summed by name in the report)");
  app.add_option("--census", opt.census,
                 "instead of timing: one step of the GPU's code path on the CPU (runtime.cpu_kernels=generic, one "
                 "process; a mesh of more than one device is refused) under the op census: per op kind and region "
                 "calls, dtypes, FLOPs, bytes, host syncs, what backward holds, and a roofline estimate on this GPU")
      ->check(CLI::IsMember({"h100", "h200", "a100"}));
  app.add_flag("--default-allocator", opt.default_allocator,
               "keep libtorch's CPU allocator (glibc maps and unmaps every block over 32 MiB each step) instead "
               "of install_caching_cpu_allocator()");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Best-of-5 GFLOP/s of an n x n x n at::mm in `dtype` on `device` (on the CPU: this process's
// intra-op threads). On CUDA each product is timed from a synchronized start to a synchronized end.
// Best of 5 products, each timed to a synchronized end.
template <class Product>
double best_gflops(int64_t n, c10::Device device, Product product) {
  product();  // warm: threads, pages, cuBLAS handles
  spmd::synchronize(device);
  double best_s = 1e30;
  for (int k = 0; k < 5; ++k) {
    auto start = Clock::now();
    product();
    spmd::synchronize(device);
    best_s = std::min(best_s, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return 2.0 * static_cast<double>(n * n * n) / best_s / 1e9;
}

// The n^3 matmul rate: at::mm, and on the CPU in fp32 also the BLAS the fused kernels chose
// (kernels/cpu/blas_library.h) split as they split it; the higher of the two is the peak.
double measure_matmul_gflops(int64_t n, at::ScalarType dtype, c10::Device device) {
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  at::Tensor a = at::randn({n, n}).to(options), b = at::randn({n, n}).to(options), c = at::empty({n, n}, options);
  double gflops = best_gflops(n, device, [&] { at::mm_out(c, a, b); });
  if (device.is_cpu() && dtype == at::kFloat && spmd::kernels::cpu::has_blas_sgemm())
    gflops = std::max(gflops, best_gflops(n, device, [&] {
      spmd::kernels::cpu::parallel_gemm(false, false, n, n, n, 1.f, a.data_ptr<float>(), n, b.data_ptr<float>(), n,
                                        0.f, c.data_ptr<float>(), n);
    }));
  return gflops;
}

// CPU time of this process (all its threads) so far, ms. Against wall time it shows how much of
// the machine the run actually got: on a shared machine, read the results with it.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Peak resident set of this process so far, MiB.
double max_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

// The spec sheet's dense peak of one GPU, TFLOP/s, for products in `dtype` (float32: with TF32
// tensor cores when `tf32`), as llm.c and torchtitan compute MFU; 0 for a device not listed (the
// CPU, other GPUs). NVIDIA's data sheets, without sparsity: A100 (SXM and PCIe) 312 bf16, 156
// TF32, 19.5 fp32; H100 SXM and H200 989 / 494 / 67; H100 PCIe 756 / 378 / 51.
double spec_peak_tflops(const std::string& name, at::ScalarType dtype, bool tf32) {
  struct Peak {
    const char* match;
    const char* also;  // a second word the name must hold ("" for none)
    double bf16, tf32, fp32;
  };
  static const Peak kPeaks[] = {{"H100", "PCIe", 756, 378, 51},
                                {"H100", "", 989, 494, 67},
                                {"H200", "", 989, 494, 67},
                                {"A100", "", 312, 156, 19.5}};
  for (const Peak& p : kPeaks) {
    if (name.find(p.match) == std::string::npos || name.find(p.also) == std::string::npos) continue;
    if (dtype == at::kBFloat16) return p.bf16;
    return tf32 ? p.tf32 : p.fp32;
  }
  return 0;
}

// The attention ops libtorch dispatched while `body` ran, by name (aten::_scaled_dot_product_
// flash_attention and its backward, ..._efficient_attention, ..._cudnn_attention, or the math
// path's aten::_scaled_dot_product_attention_math): which kernel SDPA actually chose. The CPU's own
// fused attention is no libtorch op and leaves the set empty.
std::set<std::string> attention_ops_during(const std::function<void()>& body) {
  static std::mutex mutex;
  static std::set<std::string> seen;  // RecordFunction callbacks are plain functions: shared state
  {
    std::lock_guard<std::mutex> lock(mutex);
    seen.clear();
  }
  const auto handle = at::addGlobalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        const std::string name = fn.name();
        if (name.find("scaled_dot_product") != std::string::npos || name.find("flash_attention") != std::string::npos ||
            name.find("efficient_attention") != std::string::npos) {
          std::lock_guard<std::mutex> lock(mutex);  // backward runs on autograd's threads
          seen.insert(name);
        }
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  body();
  at::removeCallback(handle);
  std::lock_guard<std::mutex> lock(mutex);
  return seen;
}

std::string git_commit() {
  std::string out;
  if (FILE* p = popen("git rev-parse --short HEAD 2>/dev/null", "r")) {
    char buffer[64];
    while (fgets(buffer, sizeof buffer, p)) out += buffer;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

double scalar_across(const spmd::Group& world, double value, bool max) {
  at::Tensor t = at::full({1}, value, at::kDouble);
  if (max) world.all_reduce_max(t); else world.all_reduce_sum(t);
  return t.item<double>();
}

// A pipeline's figures over the timed steps, per stage (index = stage): the measured bubble, the
// share of a step the stage spent blocked receiving from its neighbours (mean over the steps of
// pipeline_wait_ms / total_ms, then over the stage's ranks), and the most activation bytes in
// flight (StepResult.graph_bytes, max over steps and the stage's ranks; -1: not counted).
struct PipelineFigures {
  std::string axis;
  int64_t stages = 1;
  std::vector<double> bubble, wait_ms, graph_bytes;
  double bubble_mean = 0, bubble_theory = 0;
  // The passes replayed with a device per rank (replay_pipeline): idle share per stage, with the
  // measured hop and with free hand-overs, and how long the passes took.
  std::vector<double> replayed, replay_free_hops;
  double replayed_mean = 0, replayed_passes_ms = 0, hop_ms = 0;
  std::vector<double> replayed_wall_wait_ms;  // per stage: idle ms of the replay of wall times less waits
};

// Every rank's value at its stage's index, summed (or maxed) over the world.
std::vector<double> per_stage(const spmd::Group& world, int64_t stages, int64_t stage, double value, bool max) {
  at::Tensor t = at::full({stages}, max ? -1.0 : 0.0, at::kDouble);
  t[stage] = value;
  if (max) world.all_reduce_max(t); else world.all_reduce_sum(t);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + stages);
}

void replay_pipeline(const spmd::Group& world, const spmd::TrainState& state,
                     const std::vector<spmd::StepTimings>& timed, PipelineFigures& f);

PipelineFigures pipeline_figures(const spmd::Group& world, const spmd::TrainState& state,
                                 const std::vector<spmd::StepTimings>& timed, int64_t graph_bytes) {
  const auto& layout = state.model->layout();
  PipelineFigures f;
  f.axis = layout.pipeline.axis;
  f.stages = layout.pipeline.stages();
  const int64_t stage = layout.stage_of(state.rank());
  const double ranks_per_stage = static_cast<double>(layout.mesh.size() / f.stages);
  double share = 0, wait = 0;
  for (const auto& t : timed) {
    share += t.pipeline_wait_ms / t.total_ms;
    wait += t.pipeline_wait_ms;
  }
  const double steps = static_cast<double>(timed.size());
  f.bubble = per_stage(world, f.stages, stage, share / steps / ranks_per_stage, false);
  f.wait_ms = per_stage(world, f.stages, stage, wait / steps / ranks_per_stage, false);
  f.graph_bytes = per_stage(world, f.stages, stage, static_cast<double>(graph_bytes), true);
  f.bubble_mean = std::accumulate(f.bubble.begin(), f.bubble.end(), 0.0) / static_cast<double>(f.stages);
  f.bubble_theory = spmd::bubble_fraction({state.config.runtime.pipeline_schedule, f.stages, layout.pipeline.chunks,
                                            state.config.train.microbatches});
  if (f.stages > 1) replay_pipeline(world, state, timed, f);
  return f;
}

// Each pass's time (a StepTimings per-pass field), median over the timed steps (every step runs
// the same passes in order), mean over the stage's ranks: [stage][pass].
std::vector<std::vector<double>> stage_pass_ms(const spmd::Group& world, const spmd::TrainState& state,
                                               const std::vector<spmd::StepTimings>& timed,
                                               std::vector<double> spmd::StepTimings::*field) {
  const auto& layout = state.model->layout();
  const int64_t stages = layout.pipeline.stages();
  const auto n = static_cast<int64_t>((timed.front().*field).size());
  at::Tensor all = at::zeros({stages, n}, at::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> v;
    for (const auto& t : timed) v.push_back((t.*field)[static_cast<size_t>(i)]);
    all[layout.stage_of(state.rank())][i] = median(v);
  }
  world.all_reduce_sum(all);
  all /= static_cast<double>(layout.mesh.size() / stages);
  std::vector<std::vector<double>> ms;
  for (int64_t s = 0; s < stages; ++s) ms.emplace_back(all[s].data_ptr<double>(), all[s].data_ptr<double>() + n);
  return ms;
}

// One microbatch's activation handed from each stage's first rank to the next stage's and back,
// one pair at a time (the other ranks wait in a barrier, off the cores): half the median round trip.
double hop_ms(const spmd::Group& world, const spmd::TrainState& state) {
  const auto& layout = state.model->layout();
  const int64_t stages = layout.pipeline.stages(), rank = state.rank();
  std::vector<int> first(static_cast<size_t>(stages), -1);
  for (int r = static_cast<int>(layout.mesh.size()) - 1; r >= 0; --r) first[static_cast<size_t>(layout.stage_of(r))] = r;
  const int64_t rows = state.loader->local_batch() / state.config.train.microbatches;
  at::Tensor x = at::ones(state.stage_link->activation_shape(rows, state.config.model.block_size));
  std::vector<double> round_trips;
  for (int64_t s = 0; s + 1 < stages; ++s) {
    world.barrier();
    const int a = first[static_cast<size_t>(s)], b = first[static_cast<size_t>(s + 1)];
    for (int k = 0; k < 21 && (rank == a || rank == b); ++k) {
      const auto start = Clock::now();
      if (rank == a) { world.send_async(x, b, k).wait(); world.receive(x, b, k); }
      else { world.receive(x, a, k); world.send_async(x, a, k).wait(); }
      round_trips.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
  }
  world.barrier();
  return scalar_across(world, round_trips.empty() ? 0.0 : median(round_trips) / 2, true);
}

// The step's passes replayed in the schedule's order, a hand-over costing the measured hop: from
// each pass's CPU time (its compute alone: as a device per rank would run them; needs one thread
// per rank, as CPU time is the main thread's) and from its wall time less its waits (what these
// ranks took on these cores: with a core per rank the replay's idle time is the measured wait,
// which checks the replay). Ranks that share cores wait for a core as well as for a neighbour:
// their measured bubble is not the schedule's; the CPU-time replay's is.
void replay_pipeline(const spmd::Group& world, const spmd::TrainState& state,
                     const std::vector<spmd::StepTimings>& timed, PipelineFigures& f) {
  const spmd::PipelineShape shape{state.config.runtime.pipeline_schedule, f.stages,
                                  state.model->layout().pipeline.chunks, state.config.train.microbatches};
  std::vector<std::vector<spmd::PipelinePass>> orders;
  for (int64_t s = 0; s < f.stages; ++s) orders.push_back(spmd::stage_passes(shape, s));
  const auto cpu = stage_pass_ms(world, state, timed, &spmd::StepTimings::pass_cpu_ms);
  const auto busy = stage_pass_ms(world, state, timed, &spmd::StepTimings::pass_busy_ms);
  f.hop_ms = hop_ms(world, state);
  const spmd::PipelineReplay replay = spmd::pipeline_replay(shape, orders, cpu, f.hop_ms);
  f.replayed = replay.idle_fractions();
  f.replayed_mean = std::accumulate(f.replayed.begin(), f.replayed.end(), 0.0) / static_cast<double>(f.stages);
  f.replayed_passes_ms = replay.makespan;
  f.replay_free_hops = spmd::pipeline_replay(shape, orders, cpu, 0.0).idle_fractions();
  const spmd::PipelineReplay as_run = spmd::pipeline_replay(shape, orders, busy, f.hop_ms);
  for (size_t s = 0; s < as_run.busy.size(); ++s) f.replayed_wall_wait_ms.push_back(as_run.makespan - as_run.busy[s]);
}

void print_pipeline(const PipelineFigures& f, const spmd::Config& config) {
  std::vector<std::string> stages, memory;
  for (int64_t s = 0; s < f.stages; ++s) {
    const auto i = static_cast<size_t>(s);
    stages.push_back(fmt::format("stage {} {:.1f}% ({:.0f} ms)", s, 100.0 * f.bubble[i], f.wait_ms[i]));
    memory.push_back(f.graph_bytes[i] < 0 ? "-" : fmt::format("stage {} {:.1f} MiB", s, f.graph_bytes[i] / (1 << 20)));
  }
  fmt::print("  pipeline           {} stages over '{}', {}, {} microbatches: bubble measured {:.1f}% (mean over stages of the "
             "step blocked receiving: {}), theory (p-1)/(vM+p-1) {:.1f}%\n",
             f.stages, f.axis,
             config.runtime.virtual_stages > 1
                 ? fmt::format("{} x {} chunks", spmd::name_of(config.runtime.pipeline_schedule),
                               config.runtime.virtual_stages)
                 : spmd::name_of(config.runtime.pipeline_schedule),
             config.train.microbatches, 100.0 * f.bubble_mean,
             fmt::join(stages, ", "), 100.0 * f.bubble_theory);
  std::vector<std::string> replayed;
  for (size_t s = 0; s < f.replayed.size(); ++s)
    replayed.push_back(fmt::format("stage {} {:.1f}% ({:.1f}% with free hand-overs)", s, 100.0 * f.replayed[s],
                                   100.0 * f.replay_free_hops[s]));
  fmt::print("  pipeline replayed  a device per rank (passes' CPU times in schedule order, hand-over {:.2f} ms): "
             "bubble {:.1f}% ({}), passes {:.1f} ms; from wall times less waits: idle {:.1f} ms per stage\n",
             f.hop_ms, 100.0 * f.replayed_mean, fmt::join(replayed, ", "), f.replayed_passes_ms,
             fmt::join(f.replayed_wall_wait_ms, "/"));
  fmt::print("  activations        most bytes in flight per stage (autograd graphs): {}\n", fmt::join(memory, ", "));
}

nlohmann::json pipeline_json(const PipelineFigures& f, const spmd::Config& config) {
  nlohmann::json graph = nlohmann::json::array();
  for (double b : f.graph_bytes) graph.push_back(b < 0 ? nlohmann::json() : nlohmann::json(static_cast<int64_t>(b)));
  return {{"axis", f.axis},
          {"stages", f.stages},
          {"schedule", spmd::name_of(config.runtime.pipeline_schedule)},
          {"virtual_stages", config.runtime.virtual_stages},
          {"microbatches", config.train.microbatches},
          {"bubble_measured_per_stage", f.bubble},
          {"bubble_measured_mean", f.bubble_mean},
          {"bubble_theory", f.bubble_theory},
          {"wait_ms_per_stage", f.wait_ms},
          {"bubble_replayed_per_stage", f.replayed},
          {"bubble_replayed_mean", f.replayed_mean},
          {"bubble_replayed_free_hand_overs_per_stage", f.replay_free_hops},
          {"replayed_passes_ms", f.replayed_passes_ms},
          {"hand_over_ms", f.hop_ms},
          {"replayed_wall_idle_ms_per_stage", f.replayed_wall_wait_ms},
          {"peak_activation_bytes_per_stage", graph}};
}

int run_rank(const BenchOptions& opt, const spmd::Config& config, const spmd::RendezvousInfo& rendezvous,
             bool single_process) {
  const int local_ranks = single_process ? 1 : rendezvous.local_world_size;
  const int threads = spmd::threads_per_rank(config.runtime.threads_per_rank, local_ranks);
  at::set_num_threads(threads);
  if (!opt.default_allocator) spmd::install_caching_cpu_allocator();

  spmd::TrainState state = spmd::build_train_state(config, rendezvous, single_process);
  const spmd::Group& world = state.comm->control();  // CPU scalars: the Gloo control group
  const c10::Device device = state.comm->device();
  const bool leader = state.rank() == 0;
  const int world_size = static_cast<int>(state.model->layout().mesh.size());

  // The peak, measured with every rank multiplying at once (they share the cores, as in training),
  // before and after the steps; the better of the two counts (a busy machine only lowers it).
  world.barrier();
  // The peak of the dtype the dense products use (model.matmul_dtype).
  const at::ScalarType peak_dtype = spmd::kernels::matmul_operand_dtype(config.model.matmul_dtype, device);
  const std::string peak_dtype_name = peak_dtype == at::kBFloat16 ? "bfloat16" : "float32";
  double peak_gflops_rank = measure_matmul_gflops(opt.peak_size, peak_dtype, device);

  std::vector<spmd::StepTimings> timed;
  std::vector<double> losses, cpu_ms;
  std::vector<double> expert_exchange_ms;  // expert parallelism's all-to-alls and count gathers per step
  int64_t graph_bytes = -1;  // the most activation bytes in flight on this rank over the timed steps
  Clock::time_point timed_start;
  std::set<std::string> attention_ops;  // recorded during the last warmup step (untimed)
  for (int k = 0; k < opt.warmup + opt.steps; ++k) {
    if (k == opt.warmup) timed_start = Clock::now();
    const double cpu_start = process_cpu_ms();
    const int64_t exchange_start = spmd::expert_exchange_time_ns();
    // Timed to a synchronized end: on CUDA the step only queues its work (the PyTorch peer is
    // timed across a sync too).
    spmd::StepResult r;
    if (k + 1 == opt.warmup) attention_ops = attention_ops_during([&] { r = spmd::train_step_synchronized(state); });
    else r = spmd::train_step_synchronized(state);
    if (k >= opt.warmup) {
      timed.push_back(r.timings);
      losses.push_back(r.loss.item<double>());
      cpu_ms.push_back(process_cpu_ms() - cpu_start);
      expert_exchange_ms.push_back(static_cast<double>(spmd::expert_exchange_time_ns() - exchange_start) / 1e6);
      graph_bytes = std::max(graph_bytes, r.graph_bytes);
    }
  }
  // The timed steps' wall time from outside: the steps' own times must add up to it (each is
  // timed to a synchronized end, so none leaves device work to the next).
  const double timed_loop_ms = std::chrono::duration<double, std::milli>(Clock::now() - timed_start).count();
  std::optional<spmd::bench::DeviceProfile> device_profile;
  if (!opt.trace_path.empty() && device.is_cuda() && leader) {
    // Kineto records the kernels the GPU ran; every rank steps (the collectives need them all).
    device_profile = spmd::bench::profile_device_steps(opt.trace_path, 3, [&] { spmd::train_step_synchronized(state); });
  } else if (!opt.trace_path.empty()) {
    std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
    if (leader && !device.is_cuda()) profile = std::make_unique<torch::autograd::profiler::RecordProfile>(opt.trace_path);
    for (int k = 0; k < 3; ++k) spmd::train_step_synchronized(state);
  }
  world.barrier();
  peak_gflops_rank = std::max(peak_gflops_rank, measure_matmul_gflops(opt.peak_size, peak_dtype, device));
  const double peak_gflops = scalar_across(world, peak_gflops_rank, false);
  // Each rank's own step times; the step is synchronous, so rank 0's stand for the mesh.
  std::vector<double> totals;
  for (const auto& t : timed) totals.push_back(t.total_ms);
  const double median_ms = median(totals);
  size_t median_index = 0;
  for (size_t i = 0; i < totals.size(); ++i)
    if (std::abs(totals[i] - median_ms) < std::abs(totals[median_index] - median_ms)) median_index = i;
  const spmd::StepTimings& mid = timed[median_index];
  auto component_median = [&](double spmd::StepTimings::*field) {
    std::vector<double> v;
    for (const auto& t : timed) v.push_back(t.*field);
    return median(v);
  };

  const double rss_rank0 = scalar_across(world, leader ? max_rss_mib() : 0.0, false);
  const double rss_max = scalar_across(world, max_rss_mib(), true);
  const auto alloc = spmd::caching_cpu_allocator_stats();
  const int64_t device_peak = spmd::peak_device_tensor_bytes(device);  // -1 on the CPU
  const double tensor_peak_mib = scalar_across(
      world, static_cast<double>(device_peak >= 0 ? device_peak : alloc.peak_live_bytes) / (1 << 20), true);
  const bool tensor_peak_known = alloc.installed || device_peak >= 0;
  const int64_t buckets = state.grad_sync->num_buckets();
  const int64_t buckets_early = state.grad_sync->buckets_started_during_backward();
  const auto& prefetcher = state.model->fsdp_prefetcher();
  const int64_t fsdp_gathers = prefetcher.unit_gathers(), fsdp_prefetched = prefetcher.prefetched_gathers();
  const double slowest_median_ms = scalar_across(world, median_ms, true);
  // CPU time over wall time per thread: 1.0 = this rank had its cores to itself (or spun on them).
  const double cpu_share = median(cpu_ms) / median_ms / threads;
  const PipelineFigures pipeline = pipeline_figures(world, state, timed, graph_bytes);
  // What the autograd graphs held between forward and backward (the activations), max over the
  // timed steps and the ranks; -1 where not counted (the libtorch allocator, or not on the CPU).
  const double graph_bytes_max = scalar_across(world, static_cast<double>(graph_bytes), true);
  if (!leader) return 0;

  // Model FLOPs per token, nanoGPT's estimate_mfu (PaLM appendix B): 6 N for the matmuls forward
  // and backward (N = parameters without position embeddings; the tied wte counts once, as the LM
  // head) plus 12 L T C for attention scores and weighted sum (the causal half is not discounted).
  const auto& m = config.model;
  const int64_t n_params = spmd::num_params(m, false);
  const double flops_per_token = 6.0 * static_cast<double>(n_params) +
                                 12.0 * static_cast<double>(m.n_layer * m.block_size * m.n_embd);
  const int64_t tokens_per_step = config.data.batch_size * m.block_size;
  const double tokens_per_s = static_cast<double>(tokens_per_step) / (median_ms / 1000.0);
  const double achieved_gflops = flops_per_token * tokens_per_s / 1e9;
  const double mfu = achieved_gflops / peak_gflops;
  // Against the GPU's spec sheet (0: not a GPU listed), the figure llm.c and torchtitan print.
  const std::string gpu = spmd::device_name(device);
  const double spec_tflops = spec_peak_tflops(gpu, peak_dtype, state.comm->runtime().tf32);
  const double mfu_spec = spec_tflops > 0 ? achieved_gflops / (spec_tflops * 1e3 * world_size) : 0;
  std::vector<double> device_split;  // medians over the timed steps of each device phase (CUDA)
  for (size_t i = 0; i < mid.device_phase_ms.size(); ++i) {
    std::vector<double> v;
    for (const auto& t : timed) v.push_back(t.device_phase_ms[i]);
    device_split.push_back(median(v));
  }
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);

  fmt::print("bench_train: {} | mesh {} | {} rank(s) on {} x {} thread(s) | {} params | {} tokens/step | "
             "{} warmup + {} timed steps | allocator {} | load {:.2f}\n",
             config.source_path, state.model->layout().mesh.describe(), world_size, device.str(), threads, n_params,
             tokens_per_step, opt.warmup, opt.steps, opt.default_allocator ? "libtorch default" : "caching",
             load[0]);
  fmt::print("  tokens/s           {:.0f}\n", tokens_per_s);
  fmt::print("  median step        {:.2f} ms   (min {:.2f}, max {:.2f}; slowest rank's median {:.2f}; "
             "CPU {:.2f} ms = {:.0f}% of {} thread(s))\n",
             median_ms, *std::min_element(totals.begin(), totals.end()), *std::max_element(totals.begin(), totals.end()),
             slowest_median_ms, median(cpu_ms), 100.0 * cpu_share, threads);
  fmt::print("  median step split  data {:.2f} | forward {:.2f} | backward {:.2f} | optimizer {:.2f} ms; "
             "collectives {:.2f} ms of forward+backward\n",
             mid.data_ms, mid.forward_ms, mid.backward_ms, mid.optimizer_ms, mid.collective_ms);
  fmt::print("  MFU                {:.1f}%  ({:.1f} GFLOP/s achieved of {:.1f} GFLOP/s peak: {} x {}^3 {} matmul (at::mm or the kernels' BLAS), "
             "best of 5 before and after; {:.0f} model FLOPs/token = 6*{} + 12*{}*{}*{})\n",
             100.0 * mfu, achieved_gflops, peak_gflops, world_size, opt.peak_size, peak_dtype_name, flops_per_token, n_params,
             m.n_layer, m.block_size, m.n_embd);
  if (spec_tflops > 0)
    fmt::print("  MFU (spec)         {:.1f}%  of {} x {} dense {} peak {:.0f} TFLOP/s (spec sheet, as llm.c and torchtitan)\n",
               100.0 * mfu_spec, world_size, gpu, peak_dtype == at::kBFloat16 ? "bf16"
               : state.comm->runtime().tf32 ? "TF32" : "fp32", spec_tflops);
  else if (!gpu.empty())
    fmt::print("  MFU (spec)         -  ({} is not in bench_train's table of spec peaks)\n", gpu);
  if (device_split.size() == 4)
    fmt::print("  device split       data {:.2f} | forward+backward {:.2f} | gradient sync+norm {:.2f} | optimizer "
               "{:.2f} ms (CUDA events on the stream, medians)\n",
               device_split[0], device_split[1], device_split[2], device_split[3]);
  if (opt.warmup > 0)
    fmt::print("  attention ops      {} (dispatched in the last warmup step)\n",
               attention_ops.empty() ? std::string("none of libtorch's (the CPU's fused kernel, or no attention op)")
                                     : fmt::format("{}", fmt::join(attention_ops, ", ")));
  fmt::print("  peak memory        rank 0 {:.1f} MiB | max over ranks {:.1f} MiB (ru_maxrss)", rss_rank0, rss_max);
  if (tensor_peak_known) fmt::print("; tensors on {} {:.1f} MiB (max over ranks)", device.str(), tensor_peak_mib);
  fmt::print("\n");
  if (graph_bytes_max >= 0)
    fmt::print("  activations        {:.1f} MiB held between forward and backward (autograd graphs; max over steps "
               "and ranks)\n", graph_bytes_max / (1 << 20));
  if (buckets > 0)
    fmt::print("  gradient sync      {} bucket(s), {} all-reduced while backward ran (last step)\n", buckets,
               buckets_early);
  if (fsdp_gathers > 0)
    fmt::print("  FSDP gathers       {} unit all-gathers, {} of them prefetched (prefetch {})\n", fsdp_gathers,
               fsdp_prefetched, prefetcher.enabled() ? "on" : "off");
  if (pipeline.stages > 1) print_pipeline(pipeline, config);
  if (device_profile) spmd::bench::print_device_profile(*device_profile, 15);
  fmt::print("  loss               {:.4f} -> {:.4f} over the timed steps\n", losses.front(), losses.back());

  if (!opt.json_path.empty()) {
    nlohmann::json j;
    j["config"] = config.source_path;
    j["overrides"] = opt.overrides;
    j["commit"] = git_commit();
    j["ranks"] = world_size;
    j["threads_per_rank"] = threads;
    j["allocator"] = opt.default_allocator ? "libtorch default" : "caching";
    if (!opt.default_allocator) {
      const auto stats = spmd::caching_cpu_allocator_stats();
      j["allocator_stats"] = {{"allocations", stats.allocations}, {"cache_hits", stats.cache_hits},
                              {"cached_bytes", stats.cached_bytes}};
    }
    j["mesh"] = state.model->layout().mesh.describe();
    j["params"] = n_params;
    j["tokens_per_step"] = tokens_per_step;
    j["warmup"] = opt.warmup;
    j["steps"] = opt.steps;
    j["tokens_per_s"] = tokens_per_s;
    j["median_step_ms"] = median_ms;
    j["slowest_rank_median_step_ms"] = slowest_median_ms;
    // Expert parallelism: rank 0's all-to-alls (rows out and home, forward and backward) and count
    // gathers per step, and their share of each step (medians over the timed steps).
    std::vector<double> exchange_share;
    for (size_t i = 0; i < timed.size(); ++i) exchange_share.push_back(expert_exchange_ms[i] / timed[i].total_ms);
    j["expert_exchange_median_ms"] = median(expert_exchange_ms);
    j["expert_exchange_median_share"] = median(exchange_share);
    j["median_step_split_ms"] = {{"data", mid.data_ms},           {"forward", mid.forward_ms},
                                 {"backward", mid.backward_ms},   {"optimizer", mid.optimizer_ms},
                                 {"collectives", mid.collective_ms}};
    j["component_medians_ms"] = {{"data", component_median(&spmd::StepTimings::data_ms)},
                                 {"forward", component_median(&spmd::StepTimings::forward_ms)},
                                 {"backward", component_median(&spmd::StepTimings::backward_ms)},
                                 {"optimizer", component_median(&spmd::StepTimings::optimizer_ms)},
                                 {"collectives", component_median(&spmd::StepTimings::collective_ms)}};
    j["step_ms"] = totals;
    j["timed_loop_wall_ms"] = timed_loop_ms;
    nlohmann::json phases = nlohmann::json::array();  // each timed step's data + forward + backward + optimizer
    for (const auto& t : timed) phases.push_back(t.data_ms + t.forward_ms + t.backward_ms + t.optimizer_ms);
    j["step_phases_ms"] = phases;
    j["step_cpu_ms"] = cpu_ms;
    j["cpu_share"] = cpu_share;
    j["losses"] = losses;
    j["flops_per_token"] = flops_per_token;
    j["flops_formula"] = "6*N_params(no wpe) + 12*n_layer*block_size*n_embd";
    j["achieved_gflops"] = achieved_gflops;
    j["matmul_peak_gflops"] = peak_gflops;
    j["matmul_peak_size"] = opt.peak_size;
    j["matmul_dtype"] = spmd::name_of(config.model.matmul_dtype);
    j["matmul_peak_dtype"] = peak_dtype_name;  // what the products ran in (a CPU may keep float32)
    j["mfu"] = mfu;
    j["device"] = device.str();
    j["device_name"] = gpu;
    j["tf32"] = state.comm->runtime().tf32;
    j["spec_peak_tflops_per_device"] = spec_tflops > 0 ? nlohmann::json(spec_tflops) : nlohmann::json();
    j["mfu_spec"] = spec_tflops > 0 ? nlohmann::json(mfu_spec) : nlohmann::json();
    if (device_split.size() == 4)
      j["device_step_split_ms"] = {{"data", device_split[0]}, {"forward_backward", device_split[1]},
                                   {"gradient_sync_norm", device_split[2]}, {"optimizer", device_split[3]}};
    j["attention_ops"] = opt.warmup > 0 ? nlohmann::json(attention_ops) : nlohmann::json();
    j["peak_tensor_mib_max_over_ranks"] = tensor_peak_known ? nlohmann::json(tensor_peak_mib) : nlohmann::json();
    j["graph_bytes_max_over_ranks"] =
        graph_bytes_max >= 0 ? nlohmann::json(static_cast<int64_t>(graph_bytes_max)) : nlohmann::json();
    j["gradient_buckets"] = buckets;
    j["gradient_buckets_started_during_backward"] = buckets_early;
    j["fsdp_unit_gathers"] = fsdp_gathers;
    j["fsdp_prefetched_gathers"] = fsdp_prefetched;
    j["max_rss_mib_rank0"] = rss_rank0;
    j["max_rss_mib_max"] = rss_max;
    j["loadavg_1m"] = load[0];
    if (pipeline.stages > 1) j["pipeline"] = pipeline_json(pipeline, config);
    if (device_profile) j["device_profile"] = spmd::bench::device_profile_json(*device_profile, 30);
    std::ofstream out(opt.json_path);
    SPMD_CHECK(out.good(), "cannot write {}", opt.json_path);
    out << j.dump(2) << "\n";
  }
  return 0;
}

int run_bench(const BenchOptions& opt, const std::vector<std::string>& argv) {
  if (!opt.census.empty())
    return spmd::bench::run_census({opt.config_path, opt.overrides, opt.census, opt.json_path, opt.default_allocator});
  spmd::Config config = spmd::load_config(opt.config_path, opt.overrides);
  const int mesh_size = static_cast<int>(spmd::plan_layout(config).mesh.size());
  spmd::RendezvousInfo rendezvous;
  rendezvous.timeout_s = config.runtime.timeout_s;
  if (auto launched = spmd::detect_launch_env(spmd::current_environment())) {  // a worker: ours or a launcher's
    rendezvous = spmd::rendezvous_info(launched->rendezvous, config.runtime.timeout_s);
    SPMD_CHECK(rendezvous.world_size == mesh_size, "{}={} but the mesh has {} devices", launched->world_size_variable,
               rendezvous.world_size, mesh_size);
    return run_rank(opt, config, rendezvous, false);
  }
  const int nproc = opt.nproc > 0 ? opt.nproc : mesh_size;
  SPMD_CHECK(nproc == mesh_size, "--nproc {} but the mesh has {} devices; change mesh.shape or --nproc", nproc,
             mesh_size);
  if (nproc == 1) return run_rank(opt, config, rendezvous, true);
  spmd::LaunchOptions launch;
  launch.nproc_per_node = nproc;
  launch.threads_per_rank = static_cast<int>(config.runtime.threads_per_rank);
  spmd::mark_launched_workers();
  return spmd::launch_workers(launch, argv);
}

}  // namespace

int main(int argc, char** argv) {
  return spmd::guarded_main(std::getenv("RANK") ? fmt::format("bench_train[rank {}]", std::getenv("RANK")) : "bench_train", [&] {
    CLI::App app{"bench_train: training throughput, step split, MFU and memory of a config"};
    BenchOptions opt;
    setup_bench(app, opt);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      int code = app.exit(e);
      return code == 0 ? 0 : 2;
    }
    return run_bench(opt, std::vector<std::string>(argv, argv + argc));
  });
}
