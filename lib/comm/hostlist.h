// Slurm's compressed lists, expanded: host lists ("node[01-04,07]", "a[1-2]-ib,b3") and
// tasks-per-node counts ("2(x3),1"). Pure string functions, so launch_env can be unit-tested.
#pragma once
#include <string>
#include <vector>

namespace spmd {

// "node[01-03],gpu7" -> {node01, node02, node03, gpu7}. Ranges keep the zero padding of their
// low bound; several bracket groups in one name multiply ("r[1-2]n[1-2]" -> r1n1, r1n2, ...).
// UsageError naming `variable` for an unbalanced bracket, a bad range or an empty list.
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& variable);

// "2(x3),1" -> {2, 2, 2, 1}: Slurm's SLURM_TASKS_PER_NODE syntax. UsageError naming `variable`.
std::vector<int> expand_tasks_per_node(const std::string& list, const std::string& variable);

}  // namespace spmd
