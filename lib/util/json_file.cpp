#include "util/json_file.h"

#include <fstream>

#include <fmt/format.h>

#include "util/error.h"

namespace spmd {

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  SPMD_CHECK(in.good(), "{} {} is missing or unreadable", what, path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{} {} is not valid JSON: {}", what, path, e.what()));
  }
}

}  // namespace spmd
