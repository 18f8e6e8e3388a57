// SPMD_TEST_HOOKS parsing (see test_hooks.h).
#include "util/test_hooks.h"

#include <cstdlib>
#include <sstream>

#include "util/error.h"

namespace spmd {

namespace {
int64_t step_of(const std::string& item, const std::string& value) {
  try {
    size_t used = 0;
    const int64_t step = std::stoll(value, &used);
    if (used == value.size() && step >= 0) return step;
  } catch (const std::exception&) {
  }
  throw UsageError("SPMD_TEST_HOOKS: '" + item + "' needs a step number >= 0 after '@'");
}

// "N:R" -> the step and the rank of sigkill@N:R and sigkill_in_save@N:R.
void parse_step_rank(const std::string& item, const std::string& value, int64_t& step, int& rank) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) throw UsageError("SPMD_TEST_HOOKS: '" + item + "' needs STEP:RANK after '@'");
  step = step_of(item, value.substr(0, colon));
  rank = static_cast<int>(step_of(item, value.substr(colon + 1)));
}

void parse_sigkill(TestHooks& hooks, const std::string& item, const std::string& value) {
  parse_step_rank(item, value, hooks.sigkill_at_step, hooks.sigkill_rank);
}
}  // namespace

TestHooks parse_test_hooks(const std::string& text, int restart_count) {
  TestHooks hooks;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const size_t at = item.find('@'), eq = item.find('=');
    const std::string name = item.substr(0, std::min(at, eq));
    if (name == "nan_loss" && at != std::string::npos) hooks.nan_loss_at_step = step_of(item, item.substr(at + 1));
    else if (name == "crash_in_save" && at != std::string::npos) hooks.crash_in_save_at_step = step_of(item, item.substr(at + 1));
    else if (name == "sigkill" && at != std::string::npos) {
      if (restart_count == 0) parse_sigkill(hooks, item, item.substr(at + 1));
    } else if (name == "sigkill_always" && at != std::string::npos) parse_sigkill(hooks, item, item.substr(at + 1));
    else if (name == "sigkill_in_save" && at != std::string::npos)
      parse_step_rank(item, item.substr(at + 1), hooks.sigkill_in_save_at_step, hooks.sigkill_in_save_rank);
    else if (name == "fail_save_write" && at != std::string::npos)
      parse_step_rank(item, item.substr(at + 1), hooks.fail_save_write_at_step, hooks.fail_save_write_rank);
    else if (name == "slow_save_write" && eq != std::string::npos) hooks.slow_save_write_ms = step_of(item, item.substr(eq + 1));
    else if (name == "dump_init" && eq != std::string::npos && eq + 1 < item.size()) hooks.dump_init_dir = item.substr(eq + 1);
    else if (item == "muon_per_shard") hooks.muon_per_shard = true;
    else if (item == "loss_per_rank_mean") hooks.loss_per_rank_mean = true;
    else throw UsageError("SPMD_TEST_HOOKS: unknown hook '" + item + "'; known: nan_loss@STEP, crash_in_save@STEP, "
                           "sigkill@STEP:RANK, sigkill_always@STEP:RANK, sigkill_in_save@STEP:RANK, "
                           "fail_save_write@STEP:RANK, slow_save_write=MS, dump_init=DIR, muon_per_shard, loss_per_rank_mean");
  }
  return hooks;
}

const TestHooks& test_hooks() {
  static const TestHooks hooks = [] {
    const char* text = std::getenv("SPMD_TEST_HOOKS");
    const char* attempt = std::getenv("SPMD_RESTART_COUNT");  // ours, else torchrun's
    if (!attempt) attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
    return text ? parse_test_hooks(text, attempt ? std::atoi(attempt) : 0) : TestHooks{};
  }();
  return hooks;
}

}  // namespace spmd
