// The calibration command's launcher side and its worker.
#include "commands/calibrate_command.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/backend.h"
#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "launch/launcher.h"
#include "launch/preflight_ranks.h"
#include "plan/calibrate.h"
#include "util/durable_file.h"
#include "util/error.h"

namespace spmd {

namespace {
int calibrate_worker(const Config& config, const RendezvousInfo& rendezvous, const CalibrateOptions& options) {
  at::set_num_threads(threads_per_rank(config.runtime.threads_per_rank, rendezvous.local_world_size));
  const Mesh mesh = probe_mesh(options.devices);
  Communicator comm(rendezvous, mesh, resolve_runtime(config.runtime));
  const MachineRates rates = measure_machine_rates(config, comm);
  if (comm.rank() == 0) {
    nlohmann::json j = machine_rates_json(rates);
    j["measured_with"] = {{"backend", comm.runtime().backend}, {"device", comm.device().str()},
                          {"threads_per_rank", at::get_num_threads()}, {"config", config.source_path}};
    write_file_durably(options.rates_path, j.dump(2) + "\n");
    fmt::print("wrote the rates of {} devices to {}: matmul {:.3g} TFLOP/s ({:.2g}x alone) and memory {:.3g} GB/s "
               "per device\n",
               options.devices, options.rates_path, rates.matmul_flops_per_s / 1e12, rates.lone_speedup,
               rates.memory_bytes_per_s / 1e9);
  }
  return 0;
}
}  // namespace

int run_calibrate(const Config& config, const CalibrateOptions& options, const std::vector<std::string>& argv) {
  if (auto launched = detect_launch_env(current_environment())) {
    SPMD_CHECK(launched->rendezvous.world_size == options.devices, "{}={} but --devices {}",
               launched->world_size_variable, launched->rendezvous.world_size, options.devices);
    return calibrate_worker(config, rendezvous_info(launched->rendezvous, config.runtime.timeout_s), options);
  }
  resolve_runtime(config.runtime);  // cuda/nccl where they cannot run: exit 2 before any process starts
  LaunchOptions launch;
  launch.nproc_per_node = static_cast<int>(options.devices);
  launch.threads_per_rank = static_cast<int>(config.runtime.threads_per_rank);
  mark_launched_workers();
  return launch_workers(launch, argv);
}

}  // namespace spmd
