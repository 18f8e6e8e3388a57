// Which BLAS the fused CPU kernels multiply with, and what kernels it runs on this CPU.
//
// Candidates: the sgemm_ libtorch carries (MKL in the torch wheel) and OpenBLAS (the scipy-openblas32
// wheel beside torch, its symbols prefixed scipy_). The faster differs by CPU (MKL on a current
// Intel, OpenBLAS on AMD EPYC). SPMD_BLAS=mkl or openblas forces one; SPMD_BLAS=auto (the default)
// times both on this process's threads with a linear layer's three products (width 384, 256 rows:
// forward and the two backward products), in 8 interleaved pairs of rounds after 0.15 s of untimed
// ones, and decides by the median of the pairs' ratios, or by the CPU's vendor where the margin is
// small or the rounds disagree (the rule and its thresholds: blas_decision.h). The choice is kept
// with its evidence (every round, the median, the agreement, the machine's load while timing, the
// basis, when) in blas-choice.json in SPMD_CACHE_DIR (else $XDG_CACHE_HOME/spmd-train or
// ~/.cache/spmd-train), so every later run there uses the same library, hence the same bits. A
// choice made by rule, by a small margin or under load is timed again at the next start, at most 3
// times; a clear one timed on a quiet machine is final. The processes a launcher starts take its
// choice without timing (SPMD_BLAS_DECIDED, set here).
#pragma once
#include <optional>
#include <string>

namespace spmd::kernels::cpu {

// Fortran-convention sgemm_.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);

// The chosen sgemm (selected on first use), or nullptr when no BLAS sgemm can be called directly.
SgemmFn selected_sgemm();

// One line for the runtime log: the library, its version, the kernels it runs and why, e.g.
// "OpenBLAS 0.3.34 (SkylakeX kernels) (timed 1.18x faster here than MKL 2024.2 (...): median of 8
// interleaved rounds, 8 of them agree; kept in ...)" or "MKL 2024.2 (...) (by rule for an Intel CPU:
// timed within 4% of OpenBLAS ...; timed again at the next start; kept in ...)".
std::string blas_description();

// OpenBLAS core names that are generic (SSE-only) kernels: slow on any CPU with AVX2 or AVX-512.
bool is_generic_openblas_core(const std::string& core);

// The OPENBLAS_CORETYPE a worker process should get, or nothing to leave its environment alone:
// when OpenBLAS picked (or was forced onto) a generic core on a CPU with AVX-512 (SkylakeX) or
// AVX2 (Haswell). A user's non-generic choice is kept. Pure: the launcher's decision, unit-tested.
std::optional<std::string> openblas_coretype_override(const std::string& loaded_core, const std::string& user_value,
                                                      bool cpu_has_avx512, bool cpu_has_avx2);

// What the runtime line says when the user's OPENBLAS_CORETYPE holds OpenBLAS below this CPU's
// vector width (Haswell's AVX2 kernels on a CPU with AVX-512: about half its float32 GEMM speed),
// or nothing. The choice is kept, as above; only made visible. Pure, unit-tested.
std::optional<std::string> openblas_forced_core_note(const std::string& user_value, bool cpu_has_avx512,
                                                     bool cpu_has_avx2);

// The same decision for this process and CPU (loads OpenBLAS if present; nothing when absent).
std::optional<std::string> openblas_coretype_for_workers();

}  // namespace spmd::kernels::cpu
