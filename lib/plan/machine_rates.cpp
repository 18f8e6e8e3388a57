// Rates file: units people write (TFLOP/s, GB/s, microseconds), read into SI units.
#include "plan/machine_rates.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"
#include "util/json_file.h"

namespace spmd {

namespace {
constexpr const char* kWhat = "machine rates file";

double positive(const nlohmann::json& obj, const std::string& key, const std::string& where, const std::string& path) {
  SPMD_CHECK(obj.is_object() && obj.contains(key) && obj[key].is_number() && obj[key].get<double>() > 0,
             "{} {}: {}{} must be a positive number (run spmd-inspect --calibrate to measure it, or see "
             "docs/planner.md)",
             kWhat, path, where, key);
  return obj[key].get<double>();
}

LinkRate read_link(const nlohmann::json& obj, const std::string& where, const std::string& path) {
  SPMD_CHECK(obj.is_object(), "{} {}: {} must be an object with latency_us and bandwidth_GBps", kWhat, path, where);
  SPMD_CHECK(obj.contains("latency_us") && obj["latency_us"].is_number() && obj["latency_us"].get<double>() >= 0,
             "{} {}: {}latency_us must be a non-negative number", kWhat, path, where);
  return {obj["latency_us"].get<double>() * 1e-6, positive(obj, "bandwidth_GBps", where, path) * 1e9};
}

// An object's key that stands for a count (a group size, a row count): at least `least`.
int64_t count_key(const std::string& key, int64_t least, const std::string& object, const std::string& what,
                  const std::string& path) {
  int64_t n = 0;
  try {
    n = std::stoll(key);
  } catch (const std::exception&) {
  }
  SPMD_CHECK(n >= least, "{} {}: {} key '{}' must be a {} >= {}", kWhat, path, object, key, what, least);
  return n;
}

nlohmann::json link_json(const LinkRate& l) {
  return {{"latency_us", l.latency_s * 1e6}, {"bandwidth_GBps", l.bytes_per_s / 1e9}};
}
}  // namespace

LinkRate MachineRates::link(const std::vector<std::string>& names, int64_t group_size) const {
  bool all_named = !names.empty();
  LinkRate slowest{0, std::numeric_limits<double>::infinity()};
  for (const auto& n : names) {
    auto it = axes.find(n);
    if (it == axes.end()) { all_named = false; break; }
    slowest.latency_s = std::max(slowest.latency_s, it->second.latency_s);
    slowest.bytes_per_s = std::min(slowest.bytes_per_s, it->second.bytes_per_s);
  }
  if (all_named) return slowest;
  auto it = group_sizes.lower_bound(group_size);
  if (it != group_sizes.end()) return it->second;
  std::vector<int64_t> sizes;
  for (const auto& [n, l] : group_sizes) sizes.push_back(n);
  throw UsageError(fmt::format(
      "{} {}: no rate for mesh axis [{}] ({} devices): it names axes [{}] and group sizes [{}]; measure this many "
      "devices with spmd-inspect --calibrate --devices N, or add axes.{} to the file",
      kWhat, source, fmt::join(names, ", "), group_size, fmt::join([&] {
        std::vector<std::string> v;
        for (const auto& [n, l] : axes) v.push_back(n);
        return v;
      }(), ", "), fmt::join(sizes, ", "), names.empty() ? "NAME" : names.front()));
}

double MachineRates::matmul_rate(double rows) const {
  if (matmul_flops_per_s_by_rows.empty()) return matmul_flops_per_s;
  const auto& by_rows = matmul_flops_per_s_by_rows;
  auto above = by_rows.lower_bound(static_cast<int64_t>(std::ceil(rows)));
  if (above == by_rows.begin()) return above->second;
  if (above == by_rows.end()) return std::prev(above)->second;
  const auto below = std::prev(above);
  const double x = std::log(rows / static_cast<double>(below->first)) /
                   std::log(static_cast<double>(above->first) / static_cast<double>(below->first));
  return below->second + std::clamp(x, 0.0, 1.0) * (above->second - below->second);
}

MachineRates read_machine_rates(const std::string& path) {
  const nlohmann::json j = read_json_file(path, kWhat);
  SPMD_CHECK(j.is_object(), "{} {}: expected a JSON object", kWhat, path);
  MachineRates r;
  r.source = path;
  r.matmul_flops_per_s = positive(j, "matmul_TFLOPs", "", path) * 1e12;
  r.memory_bytes_per_s = positive(j, "memory_GBps", "", path) * 1e9;
  if (j.contains("axes"))
    for (const auto& [name, link] : j["axes"].items()) r.axes[name] = read_link(link, "axes." + name + ".", path);
  if (j.contains("group_sizes"))
    for (const auto& [size, link] : j["group_sizes"].items())
      r.group_sizes[count_key(size, 2, "group_sizes", "group size", path)] = read_link(link, "group_sizes." + size + ".", path);
  if (j.contains("matmul_TFLOPs_by_rows")) {
    const nlohmann::json& by_rows = j["matmul_TFLOPs_by_rows"];
    SPMD_CHECK(by_rows.is_object(), "{} {}: matmul_TFLOPs_by_rows must be an object of rows -> TFLOP/s", kWhat, path);
    for (const auto& [rows, rate] : by_rows.items())
      r.matmul_flops_per_s_by_rows[count_key(rows, 1, "matmul_TFLOPs_by_rows", "row count", path)] =
          positive(by_rows, rows, "matmul_TFLOPs_by_rows.", path) * 1e12;
  }
  if (j.contains("devices_per_core")) {
    r.devices_per_core = positive(j, "devices_per_core", "", path);
    SPMD_CHECK(r.devices_per_core >= 1, "{} {}: devices_per_core must be at least 1 (1: each device its own)", kWhat,
               path);
  }
  if (j.contains("devices") && j["devices"].is_number_integer()) r.devices = j["devices"].get<int64_t>();
  return r;
}

nlohmann::json machine_rates_json(const MachineRates& r) {
  nlohmann::json j{{"matmul_TFLOPs", r.matmul_flops_per_s / 1e12}, {"memory_GBps", r.memory_bytes_per_s / 1e9},
                   {"devices_per_core", r.devices_per_core}, {"devices", r.devices}};
  for (const auto& [rows, rate] : r.matmul_flops_per_s_by_rows) j["matmul_TFLOPs_by_rows"][std::to_string(rows)] = rate / 1e12;
  for (const auto& [name, link] : r.axes) j["axes"][name] = link_json(link);
  for (const auto& [n, link] : r.group_sizes) j["group_sizes"][std::to_string(n)] = link_json(link);
  return j;
}

}  // namespace spmd
