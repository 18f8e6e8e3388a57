// Launcher detection from the environment (see launch_env.h).
#include "comm/launch_env.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>

#include <fmt/format.h>

#include "comm/hostlist.h"
#include "util/error.h"

extern char** environ;

namespace spmd {

namespace {
const std::string* find(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

// The first of `names` that is set, or "" when none is.
std::string first_set(const EnvMap& env, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (find(env, n) && !find(env, n)->empty()) return n;
  return "";
}

int env_non_negative(const EnvMap& env, const std::string& name) {
  const std::string* v = find(env, name);
  SPMD_CHECK(v != nullptr, "{} is not set", name);
  char* end = nullptr;
  const long value = std::strtol(v->c_str(), &end, 10);
  SPMD_CHECK(!v->empty() && *end == '\0' && value >= 0 && value < (1 << 30),
             "{}='{}' is not a non-negative integer", name, *v);
  return static_cast<int>(value);
}

// Every variable of a launcher's group must come with the ones it implies.
void require_all(const EnvMap& env, const std::string& trigger, std::initializer_list<const char*> needed) {
  std::string missing;
  for (const char* n : needed)
    if (!find(env, n)) missing += missing.empty() ? n : std::string(", ") + n;
  SPMD_CHECK(missing.empty(), "{} is set but {} {} not: the launcher's variables are incomplete (unset {} to "
             "let spmd-train launch its own workers)", trigger, missing, missing.find(',') == std::string::npos ? "is" : "are", trigger);
}

void check_ranks(const LaunchEnv& e, const std::string& rank_var, const std::string& local_var,
                 const std::string& local_size_var) {
  const LaunchRanks& r = e.rendezvous;
  SPMD_CHECK(r.world_size >= 1 && r.rank < r.world_size, "{}={} is not below {}={}", rank_var, r.rank,
             e.world_size_variable, r.world_size);
  SPMD_CHECK(r.local_world_size >= 1 && r.local_world_size <= r.world_size, "{}={} is not between 1 and {}={}",
             local_size_var, r.local_world_size, e.world_size_variable, r.world_size);
  SPMD_CHECK(r.local_rank < r.local_world_size, "{}={} is not below {}={}", local_var, r.local_rank, local_size_var,
             r.local_world_size);
}

// What srun and mpirun both give: the launcher's rank, world size and local rank variables, read.
LaunchEnv read_ranks(const EnvMap& env, const char* launcher, const char* rank_var, const char* size_var,
                     const char* local_rank_var) {
  LaunchEnv e;
  e.launcher = launcher;
  e.world_size_variable = size_var;
  e.rendezvous.rank = env_non_negative(env, rank_var);
  e.rendezvous.world_size = env_non_negative(env, size_var);
  e.rendezvous.local_rank = env_non_negative(env, local_rank_var);
  return e;
}

LaunchEnv from_torchrun(const EnvMap& env) {
  require_all(env, find(env, "RANK") ? "RANK" : "WORLD_SIZE", {"RANK", "WORLD_SIZE"});
  LaunchEnv e;
  e.launcher = find(env, kBuiltinLauncherMark) ? "spmd-train" : "torchrun";
  e.world_size_variable = "WORLD_SIZE";
  LaunchRanks& r = e.rendezvous;
  r.rank = env_non_negative(env, "RANK");
  r.world_size = env_non_negative(env, "WORLD_SIZE");
  r.local_rank = find(env, "LOCAL_RANK") ? env_non_negative(env, "LOCAL_RANK") : 0;
  r.local_world_size = find(env, "LOCAL_WORLD_SIZE") ? env_non_negative(env, "LOCAL_WORLD_SIZE") : r.world_size;
  r.master_addr = find(env, "MASTER_ADDR") ? *find(env, "MASTER_ADDR") : "127.0.0.1";
  r.master_port = find(env, "MASTER_PORT") ? env_non_negative(env, "MASTER_PORT") : 29500;
  check_ranks(e, "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  // torchrun's agent already serves its own store on MASTER_PORT, which libtorch 1.13's client
  // cannot use: rank 0 serves ours on a port derived from the run and attempt instead.
  const std::string* agent_store = find(env, "TORCHELASTIC_USE_AGENT_STORE");
  const bool port_taken = agent_store && (*agent_store == "True" || *agent_store == "1");
  if (port_taken)
    r.master_port = port_from_job_id(fmt::format("torchrun:{}:{}", find(env, "TORCHELASTIC_RUN_ID") ? *find(env, "TORCHELASTIC_RUN_ID") : "",
                                                 find(env, "TORCHELASTIC_RESTART_COUNT") ? *find(env, "TORCHELASTIC_RESTART_COUNT") : "0"));
  e.description = fmt::format("launcher: {} (RANK, WORLD_SIZE={}, LOCAL_WORLD_SIZE={}); rendezvous {}:{}{}",
                              e.launcher == "torchrun" && !find(env, "TORCHELASTIC_RUN_ID") ? "torchrun-style variables"
                                                                                            : e.launcher,
                              r.world_size, r.local_world_size, r.master_addr, r.master_port,
                              port_taken ? " (port: TORCHELASTIC_RUN_ID and _RESTART_COUNT; MASTER_PORT is the agent's)" : "");
  return e;
}

// Tasks on this node: the step's per-node counts at SLURM_NODEID, else the uniform count.
int slurm_local_tasks(const EnvMap& env, int world) {
  const std::string var = first_set(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (var.empty()) return world;
  const std::vector<int> counts = expand_tasks_per_node(*find(env, var), var);
  const int node = find(env, "SLURM_NODEID") ? env_non_negative(env, "SLURM_NODEID") : 0;
  if (counts.size() == 1) return counts[0];  // one node, or the same count on every node
  SPMD_CHECK(static_cast<size_t>(node) < counts.size(), "SLURM_NODEID={} but {}='{}' lists {} node(s)", node, var,
             *find(env, var), counts.size());
  return counts[static_cast<size_t>(node)];
}

LaunchEnv from_slurm(const EnvMap& env) {
  require_all(env, "SLURM_PROCID", {"SLURM_NTASKS", "SLURM_LOCALID"});
  LaunchEnv e = read_ranks(env, "srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
  LaunchRanks& r = e.rendezvous;
  r.local_world_size = slurm_local_tasks(env, r.world_size);
  check_ranks(e, "SLURM_PROCID", "SLURM_LOCALID", "the tasks on this node");
  const std::string nodes_var = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (find(env, "MASTER_ADDR")) {
    r.master_addr = *find(env, "MASTER_ADDR");
  } else {
    SPMD_CHECK(!nodes_var.empty(), "SLURM_PROCID is set but neither MASTER_ADDR nor any of SLURM_STEP_NODELIST, "
               "SLURM_JOB_NODELIST is");
    r.master_addr = expand_hostlist(*find(env, nodes_var), nodes_var)[0];  // the step's first node runs task 0
  }
  std::string port_from = "MASTER_PORT";
  if (find(env, "MASTER_PORT")) {
    r.master_port = env_non_negative(env, "MASTER_PORT");
  } else {
    require_all(env, "SLURM_PROCID without MASTER_PORT", {"SLURM_JOB_ID"});
    port_from = "SLURM_JOB_ID.SLURM_STEP_ID";
    r.master_port = port_from_job_id(*find(env, "SLURM_JOB_ID") + "." + *find(env, "SLURM_STEP_ID"));
  }
  e.description = fmt::format("launcher: srun (SLURM_PROCID, SLURM_NTASKS={}, {} task(s) on this node); rendezvous "
                              "{}:{} (host: {}, port: {})",
                              r.world_size, r.local_world_size, r.master_addr, r.master_port,
                              find(env, "MASTER_ADDR") ? "MASTER_ADDR" : "first of " + nodes_var, port_from);
  return e;
}

// "194772992.0;tcp://192.0.2.2:34223;tcp6://..." -> "192.0.2.2" (mpirun's own host).
std::string host_of_hnp_uri(const std::string& uri) {
  const size_t tcp = uri.find("tcp://");
  if (tcp == std::string::npos) return "";
  const size_t start = tcp + 6, colon = uri.find(':', start);
  return uri.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
}

LaunchEnv from_openmpi(const EnvMap& env) {
  require_all(env, find(env, "OMPI_COMM_WORLD_RANK") ? "OMPI_COMM_WORLD_RANK" : "OMPI_COMM_WORLD_SIZE",
              {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  LaunchEnv e = read_ranks(env, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
  LaunchRanks& r = e.rendezvous;
  r.local_world_size = env_non_negative(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
  check_ranks(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  std::string host_from = "MASTER_ADDR";
  if (find(env, "MASTER_ADDR")) {
    r.master_addr = *find(env, "MASTER_ADDR");
  } else if (r.local_world_size == r.world_size) {
    r.master_addr = "127.0.0.1", host_from = "all ranks on this host";
  } else {
    const std::string* uri = find(env, "OMPI_MCA_orte_hnp_uri");
    r.master_addr = uri ? host_of_hnp_uri(*uri) : "";
    host_from = "mpirun's host, from OMPI_MCA_orte_hnp_uri";
    SPMD_CHECK(!r.master_addr.empty(), "mpirun started ranks on several hosts but MASTER_ADDR is not set and "
               "OMPI_MCA_orte_hnp_uri names no tcp:// host: set MASTER_ADDR to rank 0's host (mpirun -x MASTER_ADDR=...)");
  }
  std::string port_from = "MASTER_PORT";
  if (find(env, "MASTER_PORT")) {
    r.master_port = env_non_negative(env, "MASTER_PORT");
  } else {
    port_from = first_set(env, {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE"});
    SPMD_CHECK(!port_from.empty(), "mpirun: MASTER_PORT is not set and no job id (OMPI_MCA_ess_base_jobid, "
               "OMPI_MCA_orte_ess_jobid, PMIX_NAMESPACE) to derive one from: pass mpirun -x MASTER_PORT=...");
    r.master_port = port_from_job_id(*find(env, port_from));
  }
  e.description = fmt::format("launcher: mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE={}, {} rank(s) on this "
                              "host); rendezvous {}:{} (host: {}, port: {})",
                              r.world_size, r.local_world_size, r.master_addr, r.master_port, host_from, port_from);
  return e;
}
}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

int port_from_job_id(const std::string& job_id) {
  uint32_t hash = 2166136261u;  // FNV-1a: spreads consecutive ids over the range
  for (unsigned char c : job_id) hash = (hash ^ c) * 16777619u;
  // Below Linux's ephemeral range (32768 on): no outgoing connection on the host holds the port.
  return kDerivedPortFirst + static_cast<int>(hash % (kDerivedPortEnd - kDerivedPortFirst));
}

std::string describe_builtin_launch(const EnvMap& env, int local_workers) {
  std::string line = fmt::format("launcher: built-in (no torchrun, srun or mpirun variables), {} worker process(es) "
                                 "on this host", local_workers);
  if (const std::string* job = find(env, "SLURM_JOB_ID"))
    line += fmt::format("; inside Slurm job {} but not an srun step", *job);
  return line;
}

std::optional<LaunchEnv> detect_launch_env(const EnvMap& env) {
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) return from_torchrun(env);
  // A batch script or an salloc shell has SLURM_PROCID/SLURM_JOB_ID too; only srun adds a step.
  if (find(env, "SLURM_PROCID") && find(env, "SLURM_STEP_ID")) return from_slurm(env);
  if (find(env, "OMPI_COMM_WORLD_RANK") || find(env, "OMPI_COMM_WORLD_SIZE")) return from_openmpi(env);
  return std::nullopt;
}

}  // namespace spmd
