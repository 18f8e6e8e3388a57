// Launcher detection from environment maps (torchrun, srun, mpirun; partial and contradictory
// variables), Slurm's hostlist and tasks-per-node syntax, the sigkill test hook and the argv of
// a restart.
#include <doctest/doctest.h>

#include <set>

#include "comm/hostlist.h"
#include "comm/launch_env.h"
#include "launch/launcher.h"
#include "launch/restarts.h"
#include "test_support.h"
#include "usage_error.h"
#include "util/test_hooks.h"

using namespace spmd;
using spmd::test::contains;
using spmd::test::usage_error_of;

namespace {
// What srun gives task 5 of 8 on the second of two nodes (4 tasks each).
EnvMap srun_env() {
  return {{"SLURM_JOB_ID", "4242"},         {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", "5"},            {"SLURM_NTASKS", "8"},
          {"SLURM_LOCALID", "1"},           {"SLURM_NODEID", "1"},
          {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}, {"SLURM_STEP_NODELIST", "gpu[07-08]"}};
}

EnvMap mpirun_env() {
  return {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_MCA_ess_base_jobid", "194772993"},
          {"OMPI_MCA_orte_hnp_uri", "194772992.0;tcp://10.1.2.3:34223;tcp6://[fd00::2]:59373"}};
}
}  // namespace

TEST_CASE("hostlist: Slurm's compressed host lists expand in order, keeping zero padding") {
  using V = std::vector<std::string>;
  CHECK((expand_hostlist("vm", "L") == V{"vm"}));
  CHECK((expand_hostlist("node[01-04,07]", "L") == V{"node01", "node02", "node03", "node04", "node07"}));
  CHECK((expand_hostlist("a[1-2]-ib,b3", "L") == V{"a1-ib", "a2-ib", "b3"}));
  CHECK((expand_hostlist("n[8-10]", "L") == V{"n8", "n9", "n10"}));
  CHECK((expand_hostlist("r[1-2]n[1-2]", "L") == V{"r1n1", "r1n2", "r2n1", "r2n2"}));
  CHECK((expand_hostlist("x,y[3],z", "L") == V{"x", "y3", "z"}));
}

TEST_CASE("hostlist: malformed lists are usage errors naming the variable") {
  CHECK(contains(usage_error_of([] { expand_hostlist("node[01-04", "SLURM_STEP_NODELIST"); }), "SLURM_STEP_NODELIST"));
  CHECK(contains(usage_error_of([] { expand_hostlist("node[4-1]", "L"); }), "'4-1'"));
  CHECK(contains(usage_error_of([] { expand_hostlist("node[a-b]", "L"); }), "not a number"));
  CHECK(contains(usage_error_of([] { expand_hostlist("a,,b", "L"); }), "empty host name"));
  CHECK(contains(usage_error_of([] { expand_hostlist("a[[1]]", "L"); }), "nest"));
}

TEST_CASE("hostlist: tasks per node, with Slurm's repeat syntax") {
  CHECK((expand_tasks_per_node("4", "T") == std::vector<int>{4}));
  CHECK((expand_tasks_per_node("2(x3),1", "T") == std::vector<int>{2, 2, 2, 1}));
  CHECK(contains(usage_error_of([] { expand_tasks_per_node("2(x3", "SLURM_TASKS_PER_NODE"); }), "SLURM_TASKS_PER_NODE"));
  CHECK(contains(usage_error_of([] { expand_tasks_per_node("two", "T"); }), "'two'"));
}

TEST_CASE("launch env: nothing set, an salloc shell or a batch script -> the built-in launcher") {
  CHECK_FALSE(detect_launch_env({}).has_value());
  CHECK_FALSE(detect_launch_env({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "vm"}}));
  CHECK_FALSE(detect_launch_env({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}));  // batch
  CHECK(contains(describe_builtin_launch({{"SLURM_JOB_ID", "7"}}, 4), "inside Slurm job 7 but not an srun step"));
}

TEST_CASE("launch env: torchrun's variables") {
  const EnvMap env{{"RANK", "3"},         {"WORLD_SIZE", "4"},       {"LOCAL_RANK", "3"},
                   {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "43973"},
                   {"TORCHELASTIC_RUN_ID", "x"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                   {"TORCHELASTIC_RESTART_COUNT", "2"}};
  auto e = detect_launch_env(env);
  REQUIRE(e);
  CHECK(e->launcher == "torchrun");
  CHECK(e->rendezvous.rank == 3);
  CHECK(e->rendezvous.world_size == 4);
  CHECK(e->rendezvous.master_addr == "localhost");
  CHECK(e->rendezvous.master_port == port_from_job_id("torchrun:x:2"));  // MASTER_PORT is the agent's store
  EnvMap no_agent_store = env;
  no_agent_store.erase("TORCHELASTIC_USE_AGENT_STORE");
  CHECK(detect_launch_env(no_agent_store)->rendezvous.master_port == 43973);
  CHECK(contains(e->description, "launcher: torchrun"));

  EnvMap ours{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {kBuiltinLauncherMark, "spmd-train"}};
  CHECK(detect_launch_env(ours)->launcher == "spmd-train");
}

TEST_CASE("launch env: partial or contradictory torchrun variables are usage errors naming them") {
  CHECK(contains(usage_error_of([] { detect_launch_env({{"RANK", "0"}}); }), "RANK is set but WORLD_SIZE is not"));
  CHECK(contains(usage_error_of([] { detect_launch_env({{"WORLD_SIZE", "4"}}); }), "WORLD_SIZE is set but RANK is not"));
  CHECK(contains(usage_error_of([] { detect_launch_env({{"RANK", "4"}, {"WORLD_SIZE", "4"}}); }), "RANK=4 is not below WORLD_SIZE=4"));
  CHECK(contains(usage_error_of([] { detect_launch_env({{"RANK", "x"}, {"WORLD_SIZE", "4"}}); }), "RANK='x'"));
  CHECK(contains(usage_error_of([] {
                   detect_launch_env({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
                 }),
                 "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"));
}

TEST_CASE("launch env: srun") {
  auto e = detect_launch_env(srun_env());
  REQUIRE(e);
  CHECK(e->launcher == "srun");
  CHECK(e->world_size_variable == "SLURM_NTASKS");
  CHECK(e->rendezvous.rank == 5);
  CHECK(e->rendezvous.world_size == 8);
  CHECK(e->rendezvous.local_rank == 1);
  CHECK(e->rendezvous.local_world_size == 4);
  CHECK(e->rendezvous.master_addr == "gpu07");  // the step's first node
  CHECK(e->rendezvous.master_port == port_from_job_id("4242.0"));
  CHECK(e->rendezvous.master_port >= 10000);
  CHECK(e->rendezvous.master_port < 32768);  // below Linux's ephemeral ports
  CHECK(port_from_job_id("4242.0") != port_from_job_id("4243.0"));

  EnvMap uneven = srun_env();
  uneven["SLURM_STEP_TASKS_PER_NODE"] = "5,3";
  uneven["MASTER_ADDR"] = "head";
  uneven["MASTER_PORT"] = "29400";
  e = detect_launch_env(uneven);
  CHECK(e->rendezvous.local_world_size == 3);
  CHECK(e->rendezvous.master_addr == "head");
  CHECK(e->rendezvous.master_port == 29400);

  EnvMap job_list = srun_env();  // no step node list: the job's
  job_list.erase("SLURM_STEP_NODELIST");
  job_list["SLURM_JOB_NODELIST"] = "a[3-4]-ib,b1";
  CHECK(detect_launch_env(job_list)->rendezvous.master_addr == "a3-ib");
}

TEST_CASE("launch env: partial or contradictory Slurm variables are usage errors naming them") {
  EnvMap no_ntasks = srun_env();
  no_ntasks.erase("SLURM_NTASKS");
  CHECK(contains(usage_error_of([&] { detect_launch_env(no_ntasks); }), "SLURM_PROCID is set but SLURM_NTASKS is not"));
  EnvMap beyond = srun_env();
  beyond["SLURM_PROCID"] = "8";
  CHECK(contains(usage_error_of([&] { detect_launch_env(beyond); }), "SLURM_PROCID=8 is not below SLURM_NTASKS=8"));
  EnvMap no_nodes = srun_env();
  no_nodes.erase("SLURM_STEP_NODELIST");
  CHECK(contains(usage_error_of([&] { detect_launch_env(no_nodes); }), "SLURM_STEP_NODELIST"));
  EnvMap bad_list = srun_env();
  bad_list["SLURM_STEP_NODELIST"] = "gpu[07-08";
  CHECK(contains(usage_error_of([&] { detect_launch_env(bad_list); }), "SLURM_STEP_NODELIST='gpu[07-08'"));
  EnvMap bad_node = srun_env();
  bad_node["SLURM_NODEID"] = "2";
  CHECK(contains(usage_error_of([&] { detect_launch_env(bad_node); }), "SLURM_NODEID=2"));
}

TEST_CASE("launch env: mpirun") {
  auto e = detect_launch_env(mpirun_env());
  REQUIRE(e);
  CHECK(e->launcher == "mpirun");
  CHECK(e->rendezvous.rank == 2);
  CHECK(e->rendezvous.master_addr == "127.0.0.1");  // every rank on this host
  CHECK(e->rendezvous.master_port == port_from_job_id("194772993"));

  EnvMap spread = mpirun_env();  // ranks on two hosts: mpirun's host
  spread["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  spread["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  CHECK(detect_launch_env(spread)->rendezvous.master_addr == "10.1.2.3");
  spread["MASTER_ADDR"] = "rank0-host";
  spread["MASTER_PORT"] = "29501";
  CHECK(detect_launch_env(spread)->rendezvous.master_addr == "rank0-host");
  CHECK(detect_launch_env(spread)->rendezvous.master_port == 29501);
}

TEST_CASE("launch env: partial Open MPI variables are usage errors naming them") {
  EnvMap partial = mpirun_env();
  partial.erase("OMPI_COMM_WORLD_SIZE");
  CHECK(contains(usage_error_of([&] { detect_launch_env(partial); }), "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"));
  EnvMap no_job = mpirun_env();
  no_job.erase("OMPI_MCA_ess_base_jobid");
  CHECK(contains(usage_error_of([&] { detect_launch_env(no_job); }), "MASTER_PORT"));
  EnvMap no_host = mpirun_env();
  no_host["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  no_host["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  no_host.erase("OMPI_MCA_orte_hnp_uri");
  CHECK(contains(usage_error_of([&] { detect_launch_env(no_host); }), "MASTER_ADDR"));
}

TEST_CASE("launch env: torchrun's variables win over Slurm's, Slurm's over Open MPI's") {
  EnvMap both = srun_env();
  for (const auto& [k, v] : mpirun_env()) both[k] = v;
  CHECK(detect_launch_env(both)->launcher == "srun");
  both["RANK"] = "1";
  both["WORLD_SIZE"] = "2";
  CHECK(detect_launch_env(both)->launcher == "torchrun");
}

TEST_CASE("restarts: a restart resumes from the given checkpoint, dropping the user's --resume") {
  using V = std::vector<std::string>;
  CHECK((argv_resuming_from({"t", "--config", "c"}, "ck/s") == V{"t", "--config", "c", "--resume", "ck/s"}));
  CHECK((argv_resuming_from({"t", "--resume", "old", "--config", "c"}, "ck/s") == V{"t", "--config", "c", "--resume", "ck/s"}));
  CHECK((argv_resuming_from({"t", "--resume", "--config", "c"}, "ck/s") == V{"t", "--config", "c", "--resume", "ck/s"}));
  CHECK((argv_resuming_from({"t", "--resume=old"}, "ck/s") == V{"t", "--resume", "ck/s"}));
}

TEST_CASE("test hooks: sigkill@STEP:RANK fires in the first attempt only, sigkill_always@ in every one") {
  CHECK(parse_test_hooks("sigkill@7:1").sigkill_at_step == 7);
  CHECK(parse_test_hooks("sigkill@7:1").sigkill_rank == 1);
  CHECK(parse_test_hooks("sigkill@7:1", 1).sigkill_at_step == -1);
  CHECK(parse_test_hooks("sigkill_always@7:1", 1).sigkill_at_step == 7);
  CHECK_THROWS_AS(parse_test_hooks("sigkill@7"), UsageError);
}

TEST_CASE("launcher: the free port it picks lies below Linux's ephemeral ports, drawn at random") {
  std::set<int> picked;
  for (int i = 0; i < 20; ++i) {
    const int port = pick_free_port();
    CHECK(port >= kDerivedPortFirst);
    CHECK(port < 32768);
    picked.insert(port);
  }
  CHECK(picked.size() > 10);  // not one fixed port that two launches on a host would share
}
