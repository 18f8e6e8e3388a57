// Who runs the pre-launch checks, and how a process names itself in messages: spmd-train's own
// launcher checks once before spawning its workers; for ranks another tool launched (torchrun,
// srun, ...), rank 0 checks and tells the others through the rendezvous store.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "config/config.h"
#include "config/train_options.h"

namespace spmd {

// Rank 0 runs preflight_check and publishes its verdict; the other ranks wait for it (within
// runtime.timeout_s) and throw a one-line UsageError when it failed. Leaves the connected store in
// `rendezvous` for the Communicator to reuse.
void preflight_across_ranks(const Config& config, const TrainOptions& options, RendezvousInfo& rendezvous);

// Marks the environment the launcher's workers inherit: their inputs are checked, and the
// launcher prefixes every line it forwards with the rank.
void mark_launched_workers();
bool launched_by_spmd_train();

// "spmd-train", or "spmd-train[rank 2]" for a rank of a multi-process run whose output no
// launcher of ours prefixes: the rank appears once per line, and only when there is more than one.
std::string program_label(const std::string& program);

}  // namespace spmd
