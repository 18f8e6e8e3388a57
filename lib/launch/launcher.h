// The local launcher: one worker process per local rank (re-executing this binary with the
// torchrun variables), output forwarded with a [rank r] prefix, and no worker outliving a failure.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spmd {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;       // 0: pick a free port (single node only)
  bool verbose = false;      // forward every rank's output, not just rank 0's
  int threads_per_rank = 0;  // 0: cores / local ranks
  double grace_s = 5;        // SIGTERM -> SIGKILL delay when tearing down
  bool output_to_stderr = false;  // forward the workers' lines to stderr: stdout carries a result
};

// Starts the workers as `argv` (argv[0] = this program) and waits. Returns the exit code the
// launcher should exit with: 0, the failing worker's usage code 2, 1, or 128+signal (a signal
// to the launcher). `failure`, when given, receives which rank failed and how.
int launch_workers(const LaunchOptions& options, const std::vector<std::string>& argv,
                   std::string* failure = nullptr);

// A port free now in the derived ports' range, below Linux's ephemeral ports: between this check
// and rank 0's bind no outgoing connection on the host can take it, as one could take a port the
// kernel handed out for port 0.
int pick_free_port();
// A worker's threads: `configured` (runtime.threads_per_rank) when above 0, else its share of the
// cores among `local_ranks` workers.
int threads_per_rank(int64_t configured, int local_ranks);

}  // namespace spmd
