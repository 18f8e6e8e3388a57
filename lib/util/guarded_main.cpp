// Exit-code policy shared by every binary.
#include "util/guarded_main.h"

#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "util/error.h"
#include "util/exception_text.h"

namespace spmd {

int guarded_main(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: runtime error: {}\n", program, exception_text(e));
    return 1;
  } catch (...) {
    fmt::print(stderr, "{}: runtime error: unknown exception\n", program);
    return 1;
  }
}

}  // namespace spmd
