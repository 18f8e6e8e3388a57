// Apart from test_support.cpp, which the libtorch-free fuzz build compiles in on its own.
#include "ports.h"

#include "launch/launcher.h"

namespace spmd::test {

std::string unused_port() { return std::to_string(pick_free_port()); }

}  // namespace spmd::test
