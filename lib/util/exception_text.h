// The message of an exception without libtorch's C++ backtrace (c10::Error appends one).
#pragma once
#include <exception>
#include <string>

namespace spmd {

std::string exception_text(const std::exception& e);

}  // namespace spmd
