// Rates file: units people write (TFLOP/s, GB/s, microseconds), read into SI units.
#include "plan/machine_rates.h"

#include <algorithm>
#include <cmath>
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

nlohmann::json link_json(const LinkRate& l) {
  return {{"latency_us", l.latency_s * 1e6}, {"bandwidth_GBps", l.bytes_per_s / 1e9}};
}
}  // namespace

bool MachineRates::names_all(const std::vector<std::string>& names) const {
  return !names.empty() && std::all_of(names.begin(), names.end(), [&](const auto& n) { return axes.count(n) > 0; });
}

LinkRate MachineRates::link(const std::vector<std::string>& names, int64_t group_size) const {
  if (names_all(names)) {
    LinkRate slowest{0, std::numeric_limits<double>::infinity()};
    for (const auto& n : names) {
      slowest.latency_s = std::max(slowest.latency_s, axes.at(n).latency_s);
      slowest.bytes_per_s = std::min(slowest.bytes_per_s, axes.at(n).bytes_per_s);
    }
    return slowest;
  }
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

LinkRate MachineRates::gather_link(const std::vector<std::string>& names, int64_t group_size) const {
  if (!names_all(names))
    if (auto it = gather_group_sizes.lower_bound(group_size); it != gather_group_sizes.end()) return it->second;
  return link(names, group_size);
}

namespace {
std::map<int64_t, LinkRate> read_group_sizes(const nlohmann::json& j, const std::string& key, const std::string& path) {
  std::map<int64_t, LinkRate> links;
  if (!j.contains(key)) return links;
  for (const auto& [size, link] : j[key].items()) {
    int64_t n = 0;
    try {
      n = std::stoll(size);
    } catch (const std::exception&) {
    }
    SPMD_CHECK(n >= 2, "{} {}: {} key '{}' must be a group size >= 2", kWhat, path, key, size);
    links[n] = read_link(link, key + "." + size + ".", path);
  }
  return links;
}
}  // namespace

MachineRates read_machine_rates(const std::string& path) {
  const nlohmann::json j = read_json_file(path, kWhat);
  SPMD_CHECK(j.is_object(), "{} {}: expected a JSON object", kWhat, path);
  MachineRates r;
  r.source = path;
  r.matmul_flops_per_s = positive(j, "matmul_TFLOPs", "", path) * 1e12;
  r.memory_bytes_per_s = positive(j, "memory_GBps", "", path) * 1e9;
  r.attention_flops_per_s =
      j.contains("attention_TFLOPs") ? positive(j, "attention_TFLOPs", "", path) * 1e12 : r.matmul_flops_per_s;
  if (j.contains("axes"))
    for (const auto& [name, link] : j["axes"].items()) r.axes[name] = read_link(link, "axes." + name + ".", path);
  r.group_sizes = read_group_sizes(j, "group_sizes", path);
  r.gather_group_sizes = read_group_sizes(j, "gather_group_sizes", path);
  if (j.contains("devices") && j["devices"].is_number_integer()) r.devices = j["devices"].get<int64_t>();
  if (j.contains("lone_speedup")) r.lone_speedup = std::max(1.0, positive(j, "lone_speedup", "", path));
  return r;
}

nlohmann::json machine_rates_json(const MachineRates& r) {
  nlohmann::json j{{"matmul_TFLOPs", r.matmul_flops_per_s / 1e12}, {"memory_GBps", r.memory_bytes_per_s / 1e9},
                   {"attention_TFLOPs", r.attention_flops_per_s / 1e12},
                   {"devices", r.devices}, {"lone_speedup", r.lone_speedup}};
  for (const auto& [name, link] : r.axes) j["axes"][name] = link_json(link);
  for (const auto& [n, link] : r.group_sizes) j["group_sizes"][std::to_string(n)] = link_json(link);
  for (const auto& [n, link] : r.gather_group_sizes) j["gather_group_sizes"][std::to_string(n)] = link_json(link);
  return j;
}

}  // namespace spmd
