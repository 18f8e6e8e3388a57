#include "kernels/cpu/cpu_features.h"

#include <fstream>
#include <sstream>
#include <string>

namespace spmd::kernels::cpu {

namespace {
// The value of the first /proc/cpuinfo line whose name starts with `field` (every core lists the
// same), without the blanks after its colon; `otherwise` where there is none (not x86, or no /proc).
std::string cpu_info_field(const std::string& field, const std::string& otherwise) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (line.rfind(field, 0) != 0 || colon == std::string::npos) continue;
    const size_t value = line.find_first_not_of(" \t", colon + 1);
    return value == std::string::npos ? std::string() : line.substr(value);
  }
  return otherwise;
}

bool cpuinfo_has_any_flag(std::initializer_list<const char*> wanted) {
  std::istringstream words(cpu_info_field("flags", ""));  // x86: "flags\t\t: fpu vme ..."
  for (std::string flag; words >> flag;)
    for (const char* w : wanted)
      if (flag == w) return true;
  return false;  // no such flag, or no flags line: no bf16 known
}
}  // namespace

bool has_bf16_instructions() {
  static const bool has = cpuinfo_has_any_flag({"avx512_bf16", "amx_bf16"});
  return has;
}

Bf16Products bf16_products() {
  static const Bf16Products products = [] {
    if (cpuinfo_has_any_flag({"amx_bf16"})) return Bf16Products::kFaster;
    if (!has_bf16_instructions()) return Bf16Products::kEmulated;
    return cpu_vendor() == "GenuineIntel" ? Bf16Products::kSlower : Bf16Products::kFaster;
  }();
  return products;
}

std::string bf16_products_flag() {
  if (!takes_bf16_products()) return "";
  return cpuinfo_has_any_flag({"amx_bf16"}) ? "amx_bf16" : "avx512_bf16";
}

std::string cpu_vendor() { return cpu_info_field("vendor_id", ""); }

std::string cpu_model() { return cpu_info_field("model name", "unknown CPU"); }

}  // namespace spmd::kernels::cpu
