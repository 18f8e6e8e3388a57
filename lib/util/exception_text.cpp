// c10::Error knows its message without the backtrace; everything else is what() as is.
#include "util/exception_text.h"

#include <c10/util/Exception.h>

namespace spmd {

std::string exception_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

}  // namespace spmd
