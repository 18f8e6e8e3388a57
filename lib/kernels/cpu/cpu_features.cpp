#include "kernels/cpu/cpu_features.h"

#include <fstream>
#include <sstream>
#include <string>

namespace spmd::kernels::cpu {

namespace {
bool cpuinfo_has_any_flag(std::initializer_list<const char*> wanted) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;  // x86: "flags\t\t: fpu vme ..."
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string flag; words >> flag;)
      for (const char* w : wanted)
        if (flag == w) return true;
    return false;  // every core lists the same flags
  }
  return false;  // no flags line (not x86, or no /proc): no bf16 known
}

std::string cpu_info_field(const std::string& field, const std::string& otherwise) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field, 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
  return otherwise;
}
}  // namespace

bool has_bf16_instructions() {
  static const bool has = cpuinfo_has_any_flag({"avx512_bf16", "amx_bf16"});
  return has;
}

std::string cpu_vendor() { return cpu_info_field("vendor_id", ""); }

std::string cpu_model() { return cpu_info_field("model name", "unknown CPU"); }

}  // namespace spmd::kernels::cpu
