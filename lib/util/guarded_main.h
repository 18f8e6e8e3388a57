// Runs a program's body and turns every exception into a message and an exit code:
// UsageError -> 2, anything else -> 1. No exception ever reaches std::terminate.
#pragma once
#include <functional>
#include <string>

namespace spmd {

int guarded_main(const std::string& program, const std::function<int()>& body);

}  // namespace spmd
