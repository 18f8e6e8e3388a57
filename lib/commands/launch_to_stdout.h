// Launching the workers of a command whose stdout is its result alone (sample's text, eval's
// scores): the workers write the result to a file named by `result_flag`, and the launcher prints
// it whole once they all succeeded. Their logs go to stderr.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"

namespace spmd {

// to_stdout false: the user named the result file, and `argv` already carries it.
int launch_to_stdout(const Config& config, int nproc, const std::vector<std::string>& argv, bool to_stdout,
                     const std::string& result_flag, const std::string& command);

}  // namespace spmd
