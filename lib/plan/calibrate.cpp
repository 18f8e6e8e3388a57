// The calibration probe. Each measurement is the median of timed repetitions after a warm-up;
// ranks' results are averaged over the world group. An all-reduce of S bytes over n devices is
// timed at two sizes and fitted to t = latency + 2 (n-1)/n S / bandwidth (machine_rates.h).
#include "plan/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "comm/communicator.h"
#include "util/error.h"

namespace spmd {

// Latency and bandwidth from two timings of a collective that moves `small` and `large` bytes
// over the wire: t = latency + bytes / bandwidth.
LinkRate fit_link(double small, double t_small, double large, double t_large) {
  const double bandwidth = (large - small) / std::max(t_large - t_small, 1e-9);
  return {std::max(0.0, t_small - small / bandwidth), bandwidth};
}

namespace {
constexpr int kRepeats = 7;

double median_seconds(const std::function<void()>& work, int repeats = kRepeats) {
  work();  // warm-up
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[static_cast<size_t>(repeats / 2)];
}

// Calls of `work` per timed sample: about kSampleSeconds on the slowest rank, the same count on
// every rank. Long enough that ranks sharing a core share it within a sample, as they do over a
// training step (a small matmul alone ends inside one time slice and never sees the others).
constexpr double kSampleSeconds = 0.03;

int64_t calls_per_sample(const Communicator& comm, const std::function<void()>& work) {
  const double once = median_seconds(work, 3);
  at::Tensor calls = at::full({1}, std::ceil(kSampleSeconds / std::max(once, 1e-7)), at::kDouble);
  comm.control().all_reduce_max(calls);
  return std::clamp<int64_t>(static_cast<int64_t>(calls.item<double>()), 1, 1 << 20);
}

double seconds_per_call(const std::function<void()>& work, int64_t calls) {
  return median_seconds([&] {
           for (int64_t i = 0; i < calls; ++i) work();
         }) /
         static_cast<double>(calls);
}

double world_mean(const Communicator& comm, double x) {
  at::Tensor t = at::full({1}, x, at::kDouble);
  comm.control().all_reduce_sum(t);
  return t.item<double>() / static_cast<double>(comm.mesh().size());
}

// The model's MLP up-projection on one device's share of a step's rows (at least 64): its rate
// with every device busy, and how much faster rank 0 runs it while the others wait at a barrier
// (ranks sharing CPU cores: an idle rank's core goes to the busy ones).
struct MatmulRates {
  double flops_per_s = 0, lone_speedup = 1;
};

MatmulRates matmul_rates(const Config& config, const Communicator& comm) {
  const int64_t C = config.model.n_embd;
  const int64_t rows = std::max<int64_t>(64, config.data.batch_size * config.model.block_size / comm.mesh().size());
  const at::Tensor a = at::randn({rows, C}), b = at::randn({C, 4 * C});
  at::Tensor out = at::empty({rows, 4 * C});
  const auto multiply = [&] { at::mm_out(out, a, b); };
  const int64_t calls = calls_per_sample(comm, multiply);
  comm.control().barrier();
  const double busy_s = seconds_per_call(multiply, calls);
  const double flops = 2.0 * static_cast<double>(rows * C * 4 * C);
  comm.control().barrier();
  const double lone_s = comm.rank() == 0 ? seconds_per_call(multiply, calls) : 0;
  comm.control().barrier();
  const double speedup = comm.rank() == 0 ? busy_s / lone_s : 0;
  return {world_mean(comm, flops / busy_s),
          std::max(1.0, world_mean(comm, speedup) * static_cast<double>(comm.mesh().size()))};
}

// Attention op by op, as the context-parallel paths compute it, forward and backward (softmax's
// backward and the masked scores cost far more per FLOP than the products): a device's rows'
// queries at half the positions (a context rank's share at cp 2) over every key; FLOPs of QK^T and
// PV forward and of their four products backward.
double attention_rate(const Config& config, const Communicator& comm) {
  const auto& m = config.model;
  const int64_t rows = std::max<int64_t>(1, config.data.batch_size / comm.mesh().size());
  const int64_t H = m.n_head, D = m.head_dim(), T = m.block_size, Tq = std::max<int64_t>(1, T / 2);
  const auto leaf = [](at::IntArrayRef shape) { return at::randn(shape).requires_grad_(true); };
  const at::Tensor q = leaf({rows, H, Tq, D}), k = leaf({rows, H, T, D}), v = leaf({rows, H, T, D});
  const at::Tensor hidden = at::arange(T).unsqueeze(0) > at::arange(Tq).unsqueeze(1);
  const at::Tensor grad_out = at::randn({rows, H, Tq, D});
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const auto attend = [&] {
    at::Tensor s = at::matmul(q, k.transpose(-2, -1)) * scale;
    at::matmul(at::softmax(s.masked_fill(hidden, -INFINITY), -1), v).backward(grad_out);
  };
  const int64_t calls = calls_per_sample(comm, attend);
  comm.control().barrier();
  const double s = seconds_per_call(attend, calls);
  return world_mean(comm, 3 * 4.0 * static_cast<double>(rows * H * Tq * T * D) / s);
}

double memory_rate(const Communicator& comm) {
  const int64_t n = int64_t{1} << 22;  // 16 MiB per operand: past the caches
  const at::Tensor a = at::randn({n}), b = at::randn({n});
  at::Tensor out = at::empty({n});
  const auto add = [&] { at::add_out(out, a, b); };
  const int64_t calls = calls_per_sample(comm, add);
  comm.control().barrier();
  const double s = seconds_per_call(add, calls);
  return world_mean(comm, 3.0 * 4 * static_cast<double>(n) / s);
}

LinkRate all_reduce_rate(const Communicator& comm, const std::vector<std::string>& axes) {
  const Group& group = comm.along(axes);
  const int64_t n = group.size();
  const double small = 4096, large = 4 << 20;  // bytes
  auto time_bytes = [&](double bytes) {
    at::Tensor t = at::ones({static_cast<int64_t>(bytes / 4)}, at::TensorOptions().device(comm.device()));
    const auto reduce = [&] { group.all_reduce_sum(t); };
    const int64_t calls = calls_per_sample(comm, reduce);
    comm.world().barrier();
    return world_mean(comm, seconds_per_call(reduce, calls));
  };
  const double wire = 2.0 * static_cast<double>(n - 1) / static_cast<double>(n);  // ring: 2(n-1)/n S
  const double t_small = time_bytes(small), t_large = time_bytes(large);  // in this order on every rank
  return fit_link(wire * small, t_small, wire * large, t_large);
}

// An all-gather and a reduce-scatter of the same full tensor, their mean fitted to
// t = latency + (n-1)/n S / bandwidth from two sizes (a member's share 4 KiB and 4 MiB).
LinkRate gather_rate(const Communicator& comm, const std::vector<std::string>& axes) {
  const Group& group = comm.along(axes);
  const int64_t n = group.size();
  auto time_bytes = [&](int64_t share_floats) {
    const at::TensorOptions options = at::TensorOptions().device(comm.device());
    const at::Tensor share = at::ones({share_floats}, options), full = at::ones({n * share_floats}, options);
    const auto gather_scatter = [&] {
      group.all_gather(share, 0);
      group.reduce_scatter_sum(full, 0);
    };
    const int64_t calls = calls_per_sample(comm, gather_scatter);
    comm.world().barrier();
    return world_mean(comm, seconds_per_call(gather_scatter, calls) / 2);
  };
  const int64_t small = 1024, large = 1 << 20;  // floats per member
  // A ring gather of the full n-member tensor moves (n-1)/n of its bytes.
  const double wire = static_cast<double>(n - 1) * 4.0;  // per float of a member's share
  const double t_small = time_bytes(small), t_large = time_bytes(large);  // in this order on every rank
  return fit_link(wire * static_cast<double>(small), t_small, wire * static_cast<double>(large), t_large);
}

}  // namespace

// Axes p0, p1, ... of the prime factors of N: the groups along the last k axes have the suffix
// products' sizes (N = 8: [2, 2, 2] gives groups of 2, 4 and 8).
Mesh probe_mesh(int64_t devices) {
  std::vector<int64_t> shape;
  for (int64_t n = devices, p = 2; n > 1;)
    if (n % p == 0) shape.push_back(p), n /= p;
    else ++p;
  if (shape.empty()) shape.push_back(1);
  std::vector<std::string> axes;
  for (size_t i = 0; i < shape.size(); ++i) axes.push_back(fmt::format("p{}", i));
  return Mesh(shape, axes);
}

MachineRates measure_machine_rates(const Config& config, Communicator& comm) {
  const Mesh& mesh = comm.mesh();
  MachineRates rates;
  rates.devices = mesh.size();
  const MatmulRates matmul = matmul_rates(config, comm);
  rates.matmul_flops_per_s = matmul.flops_per_s;
  rates.lone_speedup = matmul.lone_speedup;
  rates.memory_bytes_per_s = memory_rate(comm);
  rates.attention_flops_per_s = attention_rate(config, comm);
  for (size_t k = mesh.axes().size(); k-- > 0;) {
    std::vector<std::string> axes(mesh.axes().begin() + static_cast<int64_t>(k), mesh.axes().end());
    if (mesh.axes_size(axes) < 2) continue;
    comm.create_group(axes);
    rates.group_sizes[mesh.axes_size(axes)] = all_reduce_rate(comm, axes);
    rates.gather_group_sizes[mesh.axes_size(axes)] = gather_rate(comm, axes);
  }
  return rates;
}

}  // namespace spmd
