// Finding, timing and describing the BLAS libraries the fused CPU kernels can call (blas_library.h).
#include "kernels/cpu/blas_library.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/blas_decision.h"
#include "kernels/cpu/cpu_features.h"
#include "util/error.h"

namespace spmd::kernels::cpu {

namespace {

// What OpenBLAS's core choice depends on: the environment's OPENBLAS_CORETYPE ("" when unset) and
// the CPU's widest vectors.
std::string user_coretype() {
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  return user ? user : "";
}
struct CpuVectors {
  bool avx512, avx2;
};
CpuVectors cpu_vectors() {
  __builtin_cpu_init();
  return {__builtin_cpu_supports("avx512f") != 0, __builtin_cpu_supports("avx2") != 0};
}

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
  if (const std::string user = user_coretype(); !user.empty()) {
    const CpuVectors cpu = cpu_vectors();
    if (auto core = openblas_coretype_override("", user, cpu.avx512, cpu.avx2))
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

// C (m x n) = op(A) op(B) in row-major order, passed to the Fortran sgemm as cpu_gemm's gemm does:
// column-major C^T = op(B)^T op(A)^T, the operands swapped.
void row_major_product(SgemmFn sgemm, bool trans_a, bool trans_b, int m, int n, int k, const float* a, int lda,
                       const float* b, int ldb, float* c, int ldc) {
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  const float one = 1.f, zero = 0.f;
  sgemm(&tb, &ta, &n, &m, &k, &one, b, &ldb, a, &lda, &zero, c, &ldc);
}

// One thread's operands for a linear layer of width 384 over 256 rows (a transformer's attention
// projection at nanoGPT's CPU width, a thread's share of a microbatch as parallel_gemm splits it).
struct LayerOperands {
  static constexpr int kRows = 256, kWidth = 384;
  std::vector<float> x = std::vector<float>(kRows * kWidth, 0.5f);
  std::vector<float> dy = std::vector<float>(kRows * kWidth, 0.125f);
  std::vector<float> w = std::vector<float>(kWidth * kWidth, 0.25f);
  std::vector<float> y = std::vector<float>(kRows * kWidth), dx = std::vector<float>(kRows * kWidth);
  std::vector<float> dw = std::vector<float>(kWidth * kWidth);
};

// The layer's three products as training runs them: Y = X W, and backward dX = dY W^T, dW = X^T dY.
void layer_products(SgemmFn sgemm, LayerOperands& o) {
  constexpr int r = LayerOperands::kRows, c = LayerOperands::kWidth;
  row_major_product(sgemm, false, false, r, c, c, o.x.data(), c, o.w.data(), c, o.y.data(), c);
  row_major_product(sgemm, false, true, r, c, c, o.dy.data(), c, o.w.data(), c, o.dx.data(), c);
  row_major_product(sgemm, true, false, c, c, r, o.x.data(), c, o.dy.data(), c, o.dw.data(), c);
}

// Seconds for every thread to run the layer's products kRepeats times through one library, each
// thread on its own operands (as parallel_gemm runs one single-threaded sgemm per thread).
constexpr int kRepeats = 2;
double time_round(SgemmFn sgemm, std::vector<LayerOperands>& operands) {
  const auto start = std::chrono::steady_clock::now();
  at::parallel_for(0, static_cast<int64_t>(operands.size()), 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int rep = 0; rep < kRepeats; ++rep) layer_products(sgemm, operands[t]);
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Pairs of rounds, the order alternating within each pair: a load that comes and goes meets both
// libraries alike, and each pair's ratio compares them under the same conditions.
constexpr int kPairs = 8;
constexpr double kWarmS = 0.15;
std::vector<Round> time_interleaved(SgemmFn mkl, SgemmFn openblas, int threads) {
  std::vector<LayerOperands> operands(threads);
  // Untimed first: pages, threads, each library's buffers, and CPUs out of idle (on a quiet 2-vCPU
  // VM the first 0.1 s of rounds ran up to twice as long, in whole timer ticks, whichever library).
  for (double warm = 0; warm < kWarmS;) warm += time_round(mkl, operands) + time_round(openblas, operands);
  std::vector<Round> rounds(kPairs);
  for (int i = 0; i < kPairs; ++i) {
    Round& r = rounds[i];
    if (i % 2 == 0) {
      r.mkl_s = time_round(mkl, operands);
      r.openblas_s = time_round(openblas, operands);
    } else {
      r.openblas_s = time_round(openblas, operands);
      r.mkl_s = time_round(mkl, operands);
    }
  }
  return rounds;
}

// CPU time of the whole machine and of this process at one moment, to tell how much of the CPUs
// other processes took while the libraries were timed.
struct CpuSample {
  double machine_busy_s = 0;  // all CPUs, /proc/stat: every state but idle and iowait
  double own_s = 0;           // this process, every thread
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
};

CpuSample sample_cpu() {
  CpuSample s;
  std::ifstream in("/proc/stat");
  std::string label;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> label >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  // Steal counts as taken: in a VM it is time the host gave to other machines.
  s.machine_busy_s = (user + nice + system + irq + softirq + steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  s.own_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
            1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  return s;
}

int online_cpus() { return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)); }

// Other processes' share of all online CPUs' time between two samples (0 = none, 1 = all of it).
double others_share(const CpuSample& before, const CpuSample& after) {
  const double wall = std::chrono::duration<double>(after.at - before.at).count();
  const double others = (after.machine_busy_s - before.machine_busy_s) - (after.own_s - before.own_s);
  return std::clamp(others / (std::max(wall, 1e-6) * online_cpus()), 0.0, 1.0);
}

double loadavg_per_cpu() {
  std::ifstream in("/proc/loadavg");
  double one_minute = 0;
  in >> one_minute;
  return one_minute / online_cpus();
}

// The libraries timed on this process's threads, with the load beside them and the decision.
StoredChoice time_choice(const Library& torch, const Library& open) {
  StoredChoice c;
  c.vendor = cpu_vendor();
  c.threads = std::max(1, at::get_num_threads());
  c.loadavg_per_cpu = loadavg_per_cpu();
  const CpuSample before = sample_cpu();
  c.rounds = time_interleaved(torch.sgemm, open.sgemm, c.threads);
  c.others_cpu = others_share(before, sample_cpu());
  c.decision = decide(c.rounds, c.vendor);
  c.unix_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return c;
}

struct Selection {
  SgemmFn sgemm = nullptr;
  std::string description;
};

// Where a machine's choice is kept, so that every later run on it (a resume, a second launcher,
// another mesh) multiplies with the same BLAS and gives the same bits once the choice is final.
std::string choice_cache_path() {
  if (const char* dir = std::getenv("SPMD_CACHE_DIR"); dir && *dir) return std::string(dir) + "/blas-choice.json";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/spmd-train/blas-choice.json";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/spmd-train/blas-choice.json";
  return "";
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

// Held while one process reads, times and writes the choice, so that ranks started together (by
// srun or torchrun) time one after the other, the later ones finding the first one's choice. Given
// up after a deadline: a lock left by a stuck process costs a timing, never a hang.
class CacheLock {
 public:
  explicit CacheLock(const std::string& path) {
    if (path.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    fd_ = open((path + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (fd_ >= 0 && flock(fd_, LOCK_EX | LOCK_NB) != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~CacheLock() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

// The processes this one starts (the launcher's workers, restarts included) take its choice
// without timing: every rank of a run multiplies with the same library.
constexpr const char* kDecidedEnv = "SPMD_BLAS_DECIDED";

std::string cache_key(const Library& torch, const Library& open) {
  return fmt::format("{} | {} | {}", cpu_model(), torch.label, open.label);
}

Selection describe_choice(const StoredChoice& c, const Library& torch, const Library& open, const std::string& path) {
  const bool take_open = c.decision.library == Blas::openblas;
  const std::string kept = path.empty() ? "not kept: no cache folder" : "kept in " + path;
  return {take_open ? open.sgemm : torch.sgemm,
          fmt::format("{} ({}; {})", take_open ? open.label : torch.label,
                      explain(c, take_open ? torch.label : open.label), kept)};
}

std::optional<StoredChoice> stored_choice(const std::string& path, const std::string& key) {
  return path.empty() ? std::nullopt : choice_from_json(read_choices(path).value(key, nlohmann::json()));
}

// A worker of a launcher that already chose: its choice, described from the cache where it is there.
Selection inherited_choice(const Library& torch, const Library& open, Blas library) {
  const std::string path = choice_cache_path();
  const auto stored = stored_choice(path, cache_key(torch, open));
  if (stored && stored->decision.library == library) return describe_choice(*stored, torch, open, path);
  const bool take_open = library == Blas::openblas;
  return {take_open ? open.sgemm : torch.sgemm,
          (take_open ? open.label : torch.label) + " (chosen by the process that started this one)"};
}

std::optional<Blas> decided_by_parent() {
  const char* decided = std::getenv(kDecidedEnv);
  const std::string name = decided ? decided : "";
  if (name == "mkl") return Blas::mkl;
  if (name == "openblas") return Blas::openblas;
  return std::nullopt;
}

Selection timed_choice(const Library& torch, const Library& open) {
  if (const auto decided = decided_by_parent()) return inherited_choice(torch, open, *decided);
  const std::string path = choice_cache_path();
  const std::string key = cache_key(torch, open);
  const CacheLock lock(path);
  const auto stored = stored_choice(path, key);
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  StoredChoice choice = stored ? *stored : StoredChoice{};
  if (should_time(stored, now)) {
    choice = after_timing(stored, time_choice(torch, open));
    if (!path.empty()) remember_choice(path, key, to_json(choice));
  }
  setenv(kDecidedEnv, name_of(choice.decision.library), 1);
  return describe_choice(choice, torch, open, path);
}

// The choice among the libraries found, as SPMD_BLAS asks.
Selection choose(const std::string& asked, const Library& torch, const Library& open) {
  if (asked == "openblas" && !open.sgemm)
    throw UsageError("SPMD_BLAS=openblas, but this build found no OpenBLAS (scripts/setup-torch installs "
                     "scipy-openblas32 beside torch); use auto or mkl");
  if (asked == "openblas" || !torch.sgemm) return {open.sgemm, open.sgemm ? open.label + " (asked)" : "aten::mm"};
  if (asked == "mkl" || !open.sgemm) return {torch.sgemm, torch.label + (asked == "mkl" ? " (asked)" : "")};
  return timed_choice(torch, open);
}

Selection select() {
  const char* env = std::getenv("SPMD_BLAS");
  const std::string asked = env && *env ? env : "auto";
  if (asked != "auto" && asked != "mkl" && asked != "openblas")
    throw UsageError(fmt::format("SPMD_BLAS={}: expected auto, mkl or openblas", asked));
  const Library torch = torch_blas(), open = asked == "mkl" ? Library{} : openblas();
  Selection s = choose(asked, torch, open);
  // Where OpenBLAS was loaded (taken or timed), a word if the environment holds it on narrower kernels.
  const CpuVectors cpu = cpu_vectors();
  if (open.sgemm)
    if (auto note = openblas_forced_core_note(user_coretype(), cpu.avx512, cpu.avx2)) s.description += "; " + *note;
  return s;
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

namespace {
// The widest vectors an OpenBLAS core's kernels use: 2 AVX-512, 1 AVX2, 0 older (OpenBLAS takes
// the names case-insensitively).
int core_vector_tier(std::string core) {
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* wide : {"skylakex", "cooperlake", "sapphirerapids"})
    if (core == wide) return 2;
  for (const char* avx2 : {"haswell", "zen", "excavator", "steamroller"})
    if (core == avx2) return 1;
  return 0;
}
}  // namespace

std::optional<std::string> openblas_forced_core_note(const std::string& user_value, bool cpu_has_avx512,
                                                     bool cpu_has_avx2) {
  if (user_value.empty() || is_generic_openblas_core(user_value)) return std::nullopt;  // none, or replaced
  const int cpu_tier = cpu_has_avx512 ? 2 : cpu_has_avx2 ? 1 : 0;
  if (core_vector_tier(user_value) >= cpu_tier) return std::nullopt;
  return fmt::format("OPENBLAS_CORETYPE={} from the environment keeps OpenBLAS on {} kernels on this CPU with {} "
                     "(unset it for OpenBLAS's own choice, {}'s)",
                     user_value, core_vector_tier(user_value) == 1 ? "AVX2" : "pre-AVX2",
                     cpu_has_avx512 ? "AVX-512" : "AVX2", cpu_has_avx512 ? "SkylakeX" : "Haswell");
}

std::optional<std::string> openblas_coretype_for_workers() {
  const Library open = openblas();
  if (!open.sgemm) return std::nullopt;
  const CpuVectors cpu = cpu_vectors();
  return openblas_coretype_override(open.core, user_coretype(), cpu.avx512, cpu.avx2);
}

}  // namespace spmd::kernels::cpu
