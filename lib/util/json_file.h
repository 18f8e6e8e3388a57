// Reading a JSON document that a user or an earlier run gave us (checkpoint indexes, config.json).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace spmd {

// The JSON document in file `path`. A missing, unreadable or malformed file is a UsageError that
// starts with `what` (what the file is, e.g. "checkpoint index") and names the file.
nlohmann::json read_json_file(const std::string& path, const std::string& what);

}  // namespace spmd
