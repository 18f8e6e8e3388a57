// The one fault-injection point for tests. Production code asks it "should I fail here?"; the
// answers come from the environment variable SPMD_TEST_HOOKS, read once per process, e.g.
//   SPMD_TEST_HOOKS="nan_loss@3,crash_in_save@20,dump_init=/tmp/init"
// Unset (every real run), every hook is off. A malformed value is a UsageError naming it.
#pragma once
#include <cstdint>
#include <string>

namespace spmd {

struct TestHooks {
  int64_t nan_loss_at_step = -1;       // nan_loss@N: the loss of step N becomes NaN
  int64_t crash_in_save_at_step = -1;  // crash_in_save@N: rank 0 dies inside step N's checkpoint
                                       // save, after the shards are written, before the commit
  std::string dump_init_dir;           // dump_init=DIR: write the initialized global parameters
  int64_t sigkill_at_step = -1;        // sigkill@N:R: rank R kills itself (SIGKILL) before step N, in
  int sigkill_rank = -1;               // the launcher's first attempt only (SPMD_RESTART_COUNT, else
                                       // TORCHELASTIC_RESTART_COUNT, unset or 0); sigkill_always@N:R:
                                       // in every attempt
  int64_t sigkill_in_save_at_step = -1;  // sigkill_in_save@N:R: rank R kills itself (SIGKILL) while it
  int sigkill_in_save_rank = -1;         // writes step N's checkpoint, its shard file half written
  int64_t fail_save_write_at_step = -1;  // fail_save_write@N:R: rank R's write of step N's shard file
  int fail_save_write_rank = -1;         // fails (a RuntimeError, as a full disk gives)
  int64_t slow_save_write_ms = 0;        // slow_save_write=MS: every writer waits MS before writing
  bool muon_per_shard = false;           // muon_per_shard: Muon orthogonalises each rank's block alone
                                         // (Megatron's blockwise mode), to show that it is another update
  bool loss_per_rank_mean = false;       // loss_per_rank_mean: fine-tuning's loss divides by each rank's own
                                         // targets (the averaging that changes with the layout), to show
                                         // that the invariance tests catch it
};

const TestHooks& test_hooks();

// Parses a SPMD_TEST_HOOKS value (exposed for its unit test).
// `restart_count` is the launcher's attempt (SPMD_RESTART_COUNT), for sigkill@.
TestHooks parse_test_hooks(const std::string& text, int restart_count = 0);

}  // namespace spmd
