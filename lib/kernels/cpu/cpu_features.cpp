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
}  // namespace

bool has_bf16_instructions() {
  static const bool has = cpuinfo_has_any_flag({"avx512_bf16", "amx_bf16"});
  return has;
}

}  // namespace spmd::kernels::cpu
