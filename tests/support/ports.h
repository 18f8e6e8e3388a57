// A rendezvous port for tests that start ranks themselves (the torchrun way).
#pragma once
#include <string>

namespace spmd::test {

// The built-in launcher's pick (launch/launcher.h): free now and below Linux's ephemeral ports,
// where other tests' outgoing connections take theirs.
std::string unused_port();

}  // namespace spmd::test
