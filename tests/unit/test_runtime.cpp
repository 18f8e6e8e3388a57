// Device and backend resolution (runtime.device / runtime.backend) and the test-hook parser.
#include <doctest/doctest.h>

#include "comm/backend.h"
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

std::string usage_error_of(const RuntimeConfig& r) {
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
    MESSAGE("SKIP: a GPU is visible here, so cuda and nccl are legal; the refusal is tested on GPU-less machines");
    return;
  }
  const std::string why = built_with_cuda() ? "no GPU visible" : "built without CUDA";
  for (const auto& r : {runtime("cuda", "auto"), runtime("cuda", "gloo"), runtime("auto", "nccl")}) {
    CAPTURE(r.device);
    CAPTURE(r.backend);
    const std::string message = usage_error_of(r);
    CHECK_MESSAGE(message.find(why) != std::string::npos, message);
  }
  CHECK(usage_error_of(runtime("cuda", "auto")).find("runtime.device") != std::string::npos);
  CHECK(usage_error_of(runtime("auto", "nccl")).find("runtime.backend") != std::string::npos);
}

TEST_CASE("runtime: the rank's device is the CPU for a CPU run") {
  CHECK(rank_device(resolve_runtime(runtime("cpu", "gloo")), 3) == c10::Device(c10::kCPU));
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
