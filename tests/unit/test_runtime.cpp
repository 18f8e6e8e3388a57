// Device and backend resolution (runtime.device / runtime.backend) and the test-hook parser.
#include <doctest/doctest.h>

#include "skip.h"
#include "comm/backend.h"
#include "kernels/cuda_module.h"
#include "util/error.h"
#include "util/test_hooks.h"

using namespace spmd;

namespace {
RuntimeConfig runtime(const std::string& device, const std::string& backend) {
  RuntimeConfig r;
  r.device = device;
  r.backend = backend;
  return r;
}

std::string runtime_usage_error(const RuntimeConfig& r) {
  try {
    resolve_runtime(r);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("runtime: auto picks NCCL on CUDA only where a GPU is visible, else Gloo on the CPU") {
  const ResolvedRuntime r = resolve_runtime(runtime("auto", "auto"));
  if (visible_gpus() > 0) {
    CHECK(r.device == "cuda");
    CHECK(r.backend == "nccl");
  } else {
    CHECK(r.device == "cpu");
    CHECK(r.backend == "gloo");
  }
  CHECK(r.reason.find(built_with_cuda() ? "this build has CUDA" : "this build lacks CUDA") != std::string::npos);
  const ResolvedRuntime cpu = resolve_runtime(runtime("cpu", "auto"));
  CHECK(cpu.device == "cpu");
  CHECK(cpu.backend == "gloo");
}

TEST_CASE("runtime: cuda or nccl where they cannot run is a usage error saying which is missing") {
  if (visible_gpus() > 0) {
    SPMD_SKIP("a GPU is visible here, so cuda and nccl are legal; the refusal is tested on GPU-less machines");
  }
  const std::string why = built_with_cuda() ? "no GPU visible" : "built without CUDA";
  for (const auto& r : {runtime("cuda", "auto"), runtime("cuda", "gloo"), runtime("auto", "nccl")}) {
    CAPTURE(r.device);
    CAPTURE(r.backend);
    const std::string message = runtime_usage_error(r);
    CHECK_MESSAGE(message.find(why) != std::string::npos, message);
  }
  CHECK(runtime_usage_error(runtime("cuda", "auto")).find("runtime.device") != std::string::npos);
  CHECK(runtime_usage_error(runtime("auto", "nccl")).find("runtime.backend") != std::string::npos);
}

TEST_CASE("runtime: the CUDA module is loaded at start only where a GPU device node exists, and on request") {
  if (!cuda::built()) {
    CHECK_THROWS_AS(cuda::module(), RuntimeError);
    SPMD_SKIP("built without CUDA (" SPMD_CUDA_OFF_REASON "): no CUDA module");
  }
  CHECK(cuda::loaded() == cuda::gpu_device_node_present());
  const cuda::Module& module = cuda::module();
  CHECK(cuda::loaded());
  CHECK(&cuda::module() == &module);  // loaded once
  const int gpus = module.device_count();
  CHECK(gpus >= 0);
  if (!cuda::gpu_device_node_present()) {
    CHECK(gpus == 0);
    CHECK(visible_gpus() == 0);
    CHECK(module.device_name(0).empty());  // the driver has nothing to say
  } else {
    CHECK(visible_gpus() == gpus);
  }
}

TEST_CASE("runtime: the rank's device is the CPU for a CPU run") {
  CHECK(rank_device(resolve_runtime(runtime("cpu", "gloo")), 3) == c10::Device(c10::kCPU));
}

namespace {
ResolvedRuntime nccl_on_cuda(const std::string& asked) {
  ResolvedRuntime r;
  r.device = "cuda";
  r.backend = "nccl";
  r.asked_backend = asked;
  r.reason = "runtime: device cuda (auto), backend nccl";
  return r;
}

std::string usage_error_of_settling(const ResolvedRuntime& r, const std::vector<std::string>& gpu_ids) {
  try {
    settle_backend_for_gpus(r, gpu_ids);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("runtime: ranks on distinct GPUs keep NCCL, and a shared GPU makes auto fall back to Gloo") {
  // One GPU per rank, on two hosts whose GPUs have the same bus ids: no clash.
  const std::vector<std::string> distinct{"a/0000:3b:00.0", "a/0000:5e:00.0", "b/0000:3b:00.0", "b/0000:5e:00.0"};
  for (const std::string asked : {"auto", "nccl"}) {
    const ResolvedRuntime r = settle_backend_for_gpus(nccl_on_cuda(asked), distinct);
    CHECK(r.backend == "nccl");
    CHECK(r.reason == nccl_on_cuda(asked).reason);
  }
  // Ranks 1 and 3 were both given host a's second GPU (each its own CUDA_VISIBLE_DEVICES, say).
  const std::vector<std::string> shared{"a/0000:3b:00.0", "a/0000:5e:00.0", "b/0000:3b:00.0", "a/0000:5e:00.0"};
  const ResolvedRuntime fallback = settle_backend_for_gpus(nccl_on_cuda("auto"), shared);
  CHECK(fallback.backend == "gloo");
  CHECK(fallback.device == "cuda");
  CHECK_MESSAGE(fallback.reason.find("ranks 1, 3 share GPU a/0000:5e:00.0") != std::string::npos, fallback.reason);
  CHECK_MESSAGE(fallback.reason.find("falls back to gloo") != std::string::npos, fallback.reason);
  // Gloo asked, or already chosen: nothing to settle.
  ResolvedRuntime gloo = nccl_on_cuda("gloo");
  gloo.backend = "gloo";
  CHECK(settle_backend_for_gpus(gloo, shared).backend == "gloo");
  CHECK(settle_backend_for_gpus(gloo, shared).reason == gloo.reason);
}

TEST_CASE("runtime: an asked nccl with two ranks on one GPU is a usage error naming the ranks and the GPU") {
  const std::string message =
      usage_error_of_settling(nccl_on_cuda("nccl"), {"n1/0000:01:00.0", "n1/0000:01:00.0", "n1/0000:01:00.0"});
  CHECK_MESSAGE(message.find("runtime.backend: nccl") != std::string::npos, message);
  CHECK_MESSAGE(message.find("ranks 0, 1, 2 share GPU n1/0000:01:00.0") != std::string::npos, message);
  CHECK(usage_error_of_settling(nccl_on_cuda("nccl"), {"n1/0000:01:00.0", "n2/0000:01:00.0"}).empty());
}

TEST_CASE("runtime: the launcher's GPU check has nothing to refuse on the CPU or under auto") {
  // Without a GPU (or under auto) nothing is compared; with one, an asked nccl with more local
  // ranks than GPUs is refused before launch.
  CHECK_NOTHROW(refuse_shared_gpus(runtime("cpu", "gloo"), 8));
  CHECK_NOTHROW(refuse_shared_gpus(runtime("auto", "auto"), 8));
  if (visible_gpus() > 0) {
    const std::string why = [&] {
      try {
        refuse_shared_gpus(runtime("cuda", "nccl"), visible_gpus() + 1);
      } catch (const UsageError& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    CHECK_MESSAGE(why.find("share GPU") != std::string::npos, why);
    CHECK_NOTHROW(refuse_shared_gpus(runtime("cuda", "nccl"), visible_gpus()));
  }
}

TEST_CASE("test hooks: SPMD_TEST_HOOKS parses its three hooks and refuses anything else") {
  const TestHooks none = parse_test_hooks("");
  CHECK(none.nan_loss_at_step == -1);
  CHECK(none.crash_in_save_at_step == -1);
  CHECK(none.dump_init_dir.empty());
  const TestHooks all = parse_test_hooks("nan_loss@3,crash_in_save@20,dump_init=/tmp/x");
  CHECK(all.nan_loss_at_step == 3);
  CHECK(all.crash_in_save_at_step == 20);
  CHECK(all.dump_init_dir == "/tmp/x");
  const TestHooks in_save = parse_test_hooks("sigkill_in_save@20:1");
  CHECK(in_save.sigkill_in_save_at_step == 20);
  CHECK(in_save.sigkill_in_save_rank == 1);
  CHECK(in_save.sigkill_at_step == -1);
  CHECK_THROWS_AS(parse_test_hooks("sigkill_in_save@20"), UsageError);
  CHECK_THROWS_AS(parse_test_hooks("nan_loss@x"), UsageError);
  CHECK_THROWS_AS(parse_test_hooks("nan_los@3"), UsageError);
  CHECK_THROWS_AS(parse_test_hooks("dump_init="), UsageError);
}

TEST_CASE("runtime: TF32 is a CUDA matter: a CPU run has none whatever runtime.tf32 says") {
  for (const bool asked : {true, false}) {
    RuntimeConfig config = runtime("cpu", "gloo");
    config.tf32 = asked;
    const ResolvedRuntime r = resolve_runtime(config);
    CHECK_FALSE(r.tf32);
    CHECK_MESSAGE(r.reason.find("TF32") == std::string::npos, r.reason);  // the line speaks of it on CUDA only
  }
}
