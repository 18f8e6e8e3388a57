// Pre-launch verdict shared over the rendezvous store; the rank label of messages.
#include "launch/preflight_ranks.h"

#include "comm/launch_env.h"

#include <cstdlib>

#include <fmt/format.h>

#include "comm/rendezvous_store.h"
#include "launch/preflight.h"
#include "util/error.h"

namespace spmd {

namespace {
constexpr const char* kLauncherVariable = kBuiltinLauncherMark;  // set for the workers spmd-train spawns
constexpr const char* kVerdictKey = "spmd/preflight";
}  // namespace

void preflight_across_ranks(const Config& config, const TrainOptions& options, RendezvousInfo& rendezvous) {
  std::string verdict = "ok";
  if (rendezvous.rank == 0) {
    try {
      preflight_check(config, options);
    } catch (const UsageError& e) {
      verdict = e.what();
    }
  }
  if (rendezvous.world_size > 1) {
    rendezvous.store = connect_store(rendezvous);
    verdict = share_from_rank_zero(*rendezvous.store, rendezvous, kVerdictKey, verdict);
  }
  if (verdict == "ok") return;
  if (rendezvous.rank == 0) throw UsageError(verdict);
  throw UsageError("rank 0 found a problem with the run's inputs (see its message); not starting");
}

void mark_launched_workers() { setenv(kLauncherVariable, "spmd-train", 1); }

bool launched_by_spmd_train() {
  const char* v = std::getenv(kLauncherVariable);
  return v && std::string(v) == "spmd-train";
}

std::string program_label(const std::string& program) {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  const bool several = world && std::string(world) != "1" && std::string(world) != "";
  if (!rank || !several || launched_by_spmd_train()) return program;
  return fmt::format("{}[rank {}]", program, rank);
}

}  // namespace spmd
