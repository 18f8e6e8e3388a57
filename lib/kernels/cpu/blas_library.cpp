// Finding, timing and describing the BLAS libraries the fused CPU kernels can call (blas_library.h).
#include "kernels/cpu/blas_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace spmd::kernels::cpu {

namespace {

struct Library {
  std::string name;  // "mkl", "openblas"
  SgemmFn sgemm = nullptr;
  std::string label;  // "MKL 2024.2 (...)"
  std::string core;   // OpenBLAS's kernel set ("SkylakeX"), "" for others
};

// The sgemm_ of the process: libtorch's own BLAS (the wheel's MKL), visible to dlsym.
Library torch_blas() {
  Library lib{"mkl", reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_")), "", ""};
  using VersionFn = void (*)(char*, int);
  using IntFn = int (*)();
  if (auto version = reinterpret_cast<VersionFn>(dlsym(RTLD_DEFAULT, "MKL_Get_Version_String"))) {
    char text[256] = {};
    version(text, sizeof text);
    std::string s(text);
    const auto at = s.find("Version ");
    const std::string number = at == std::string::npos ? "" : s.substr(at + 8, s.find_first_of(" -", at + 8) - at - 8);
    // MKL dispatches its optimized code paths on Intel CPUs only; elsewhere it says "Intel(R)
    // Architecture processors" (MKL_VERBOSE=1), its generic path.
    auto intel = reinterpret_cast<IntFn>(dlsym(RTLD_DEFAULT, "mkl_serv_intel_cpu_true"));
    const bool generic = intel && intel() == 0;
    lib.label = fmt::format("MKL {} (libtorch's{})", number, generic ? "; generic dispatch on this non-Intel CPU" : "");
  } else {
    lib.name = "torch";
    lib.label = "libtorch's BLAS";
  }
  return lib;
}

// OpenBLAS from the scipy-openblas32 wheel (symbols prefixed scipy_), found where the build saw it.
Library openblas() {
  Library lib{"openblas", nullptr, "", ""};
#ifdef SPMD_OPENBLAS_LIBRARY
  // OpenBLAS reads OPENBLAS_CORETYPE when it loads: a generic core forced by the environment is
  // replaced here already (the launcher does the same, and more, for its workers).
  if (const char* user = std::getenv("OPENBLAS_CORETYPE"); user && *user) {
    __builtin_cpu_init();
    if (auto core = openblas_coretype_override("", user, __builtin_cpu_supports("avx512f"), __builtin_cpu_supports("avx2")))
      setenv("OPENBLAS_CORETYPE", core->c_str(), 1);
  }
  void* handle = dlopen(SPMD_OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (!handle) return lib;
  using CoreFn = char* (*)();
  using ThreadsFn = void (*)(int);
  lib.sgemm = reinterpret_cast<SgemmFn>(dlsym(handle, "scipy_sgemm_"));
  auto core = reinterpret_cast<CoreFn>(dlsym(handle, "scipy_openblas_get_corename"));
  auto config = reinterpret_cast<CoreFn>(dlsym(handle, "scipy_openblas_get_config"));
  // One thread per call: parallel_gemm already splits a product over libtorch's threads.
  if (auto threads = reinterpret_cast<ThreadsFn>(dlsym(handle, "scipy_openblas_set_num_threads"))) threads(1);
  std::string version = config ? config() : "";
  if (version.rfind("OpenBLAS ", 0) == 0) version = version.substr(9, version.find(' ', 9) - 9);
  lib.core = core ? core() : "unknown";
  lib.label = fmt::format("OpenBLAS {} ({} kernels)", version, lib.core);
#endif
  return lib;
}

// Seconds for every thread to run its own sgemm of a transformer-sized product (as parallel_gemm
// does), best of a few rounds.
double time_sgemm(SgemmFn sgemm) {
  const int m = 256, n = 384, k = 384, threads = std::max(1, at::get_num_threads());
  std::vector<std::vector<float>> a(threads, std::vector<float>(m * k, 0.5f)), b(threads, std::vector<float>(k * n, 0.25f)),
      c(threads, std::vector<float>(m * n));
  double best = 1e9;
  for (int round = 0; round < 6; ++round) {
    const auto start = std::chrono::steady_clock::now();
    at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
      const float one = 1.f, zero = 0.f;
      for (int64_t t = t0; t < t1; ++t)
        for (int rep = 0; rep < 4; ++rep)
          sgemm("N", "N", &n, &m, &k, &one, b[t].data(), &n, a[t].data(), &k, &zero, c[t].data(), &n);
    });
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

struct Selection {
  SgemmFn sgemm = nullptr;
  std::string description;
};

// Where a machine's timed choice is kept, so that every later run on it (a resume, a second
// launcher, another mesh) multiplies with the same BLAS and gives the same bits: a choice re-timed
// per run could flip on a busy machine.
std::string choice_cache_path() {
  if (const char* dir = std::getenv("SPMD_CACHE_DIR"); dir && *dir) return std::string(dir) + "/blas-choice.json";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/spmd-train/blas-choice.json";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/spmd-train/blas-choice.json";
  return "";
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

nlohmann::json read_choices(const std::string& path) {
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json::object();
}

// Best effort: a machine where the cache cannot be written times again next run.
void remember_choice(const std::string& path, const std::string& key, const nlohmann::json& choice) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  nlohmann::json all = read_choices(path);
  all[key] = choice;
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  std::ofstream(tmp) << all.dump(1) << "\n";
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

Selection timed_choice(const Library& torch, const Library& open) {
  const std::string path = choice_cache_path();
  const std::string key = fmt::format("{} | {} | {}", cpu_model(), torch.label, open.label);
  nlohmann::json choice = path.empty() ? nlohmann::json() : read_choices(path).value(key, nlohmann::json());
  if (!choice.is_object() || !choice.contains("openblas") || !choice.contains("speedup")) {
    const double t_torch = time_sgemm(torch.sgemm), t_open = time_sgemm(open.sgemm);
    choice = {{"openblas", t_open < t_torch}, {"speedup", t_open < t_torch ? t_torch / t_open : t_open / t_torch}};
    if (!path.empty()) remember_choice(path, key, choice);
  }
  const bool take_open = choice["openblas"].get<bool>();
  return {take_open ? open.sgemm : torch.sgemm,
          fmt::format("{} (timed {:.2f}x faster here than {}; kept in {})", take_open ? open.label : torch.label,
                      choice["speedup"].get<double>(), take_open ? torch.label : open.label, path)};
}

Selection select() {
  const char* env = std::getenv("SPMD_BLAS");
  const std::string asked = env && *env ? env : "auto";
  if (asked != "auto" && asked != "mkl" && asked != "openblas")
    throw UsageError(fmt::format("SPMD_BLAS={}: expected auto, mkl or openblas", asked));
  const Library torch = torch_blas(), open = asked == "mkl" ? Library{} : openblas();
  if (asked == "openblas" && !open.sgemm)
    throw UsageError("SPMD_BLAS=openblas, but this build found no OpenBLAS (scripts/setup-torch installs "
                     "scipy-openblas32 beside torch); use auto or mkl");
  if (asked == "openblas" || !torch.sgemm) return {open.sgemm, open.sgemm ? open.label + " (asked)" : "aten::mm"};
  if (asked == "mkl" || !open.sgemm) return {torch.sgemm, torch.label + (asked == "mkl" ? " (asked)" : "")};
  return timed_choice(torch, open);
}

const Selection& selection() {
  static const Selection s = select();
  return s;
}

}  // namespace

SgemmFn selected_sgemm() { return selection().sgemm; }

std::string blas_description() { return selection().description; }

bool is_generic_openblas_core(const std::string& core) {
  static const char* const generic[] = {"Prescott", "Katmai", "Coppermine", "Northwood", "Banias", "Core2", "Penryn",
                                        "Dunnington", "Nehalem", "Atom", "Generic", "x86_64"};
  return std::find(std::begin(generic), std::end(generic), core) != std::end(generic);
}

std::optional<std::string> openblas_coretype_override(const std::string& loaded_core, const std::string& user_value,
                                                      bool cpu_has_avx512, bool cpu_has_avx2) {
  if (!user_value.empty() && !is_generic_openblas_core(user_value)) return std::nullopt;  // the user's choice
  if (user_value.empty() && !is_generic_openblas_core(loaded_core)) return std::nullopt;  // detection worked
  if (cpu_has_avx512) return "SkylakeX";
  if (cpu_has_avx2) return "Haswell";
  return std::nullopt;  // an old CPU: generic kernels are the right ones
}

std::optional<std::string> openblas_coretype_for_workers() {
  const Library open = openblas();
  if (!open.sgemm) return std::nullopt;
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  __builtin_cpu_init();
  return openblas_coretype_override(open.core, user ? user : "", __builtin_cpu_supports("avx512f"),
                                    __builtin_cpu_supports("avx2"));
}

}  // namespace spmd::kernels::cpu
