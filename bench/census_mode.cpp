// bench_train's census mode (census_mode.h): the step, the census around it, the output.
#include "census_mode.h"

#include <fstream>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "census/census_report.h"
#include "census/op_census.h"
#include "config/config.h"
#include "launch/launcher.h"
#include "model/params.h"
#include "parallel/layout.h"
#include "train/train_state.h"
#include "util/caching_cpu_allocator.h"
#include "util/error.h"

namespace spmd::bench {

int run_census(const CensusRun& run) {
  std::vector<std::string> overrides = run.overrides;
  // The GPU's code path on this CPU: libtorch's device-generic ops, bf16 products as asked, the
  // update decided on the device.
  overrides.push_back("runtime.device=cpu");
  overrides.push_back("runtime.cpu_kernels=generic");
  const Config config = load_config(run.config_path, overrides);
  const int64_t devices = plan_layout(config).mesh.size();
  SPMD_CHECK(devices == 1,
             "--census counts one rank's step, but the mesh has {} devices; set mesh.shape to ones (e.g. --set "
             "mesh.shape=[1,1]) and data.batch_size to one rank's rows",
             devices);
  const census::GpuSpec& gpu = census::gpu_spec(run.gpu);
  at::set_num_threads(threads_per_rank(config.runtime.threads_per_rank, 1));
  if (!run.default_allocator) install_caching_cpu_allocator();

  TrainState state = build_train_state(config, RendezvousInfo{}, true);
  train_step(state);  // warm-up: the first step makes the bf16 weight copies and first allocations
  census::OpCensus census;
  train_step(state);
  // The logits' width from the head's products (the vocabulary as the head pads it).
  const census::CensusSummary sum = census::summarize(census.finish(), gpu, 0);

  const auto& m = config.model;
  const int64_t tokens = config.data.batch_size * m.block_size;
  fmt::print("bench_train --census {}: {} | {} params | {} tokens/step | matmul {} | runtime.cpu_kernels generic on "
             "the CPU, one process\n",
             run.gpu, config.source_path, num_params(m, false), tokens, name_of(m.matmul_dtype));
  census::print_census(sum);
  if (!run.json_path.empty()) {
    nlohmann::json j = census::census_json(sum);
    j["config"] = config.source_path;
    j["overrides"] = overrides;
    j["tokens_per_step"] = tokens;
    j["params"] = num_params(m, false);
    std::ofstream out(run.json_path);
    SPMD_CHECK(out.good(), "cannot write {}", run.json_path);
    out << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace spmd::bench
