// Which BLAS the fused CPU kernels multiply with, and what kernels it runs on this CPU.
//
// Candidates: the sgemm_ libtorch carries (MKL in the torch wheel) and OpenBLAS (the scipy-openblas32
// wheel beside torch, its symbols prefixed scipy_). The faster differs by CPU (MKL on a current
// Intel, OpenBLAS on AMD EPYC), so SPMD_BLAS=auto (the default) times both on this process's
// threads once per machine, keeps the faster in a small cache file (the same choice, hence the same
// bits, for every later run there), and SPMD_BLAS=mkl or openblas forces one.
#pragma once
#include <optional>
#include <string>

namespace spmd::kernels::cpu {

// Fortran-convention sgemm_.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);

// The chosen sgemm (selected on first use), or nullptr when no BLAS sgemm can be called directly.
SgemmFn selected_sgemm();

// One line for the runtime log: the library, its version and the kernels it runs, e.g.
// "OpenBLAS 0.3.34 (SkylakeX kernels) (timed 1.18x faster here than MKL 2024.2 (...); kept in ...)".
std::string blas_description();

// OpenBLAS core names that are generic (SSE-only) kernels: slow on any CPU with AVX2 or AVX-512.
bool is_generic_openblas_core(const std::string& core);

// The OPENBLAS_CORETYPE a worker process should get, or nothing to leave its environment alone:
// when OpenBLAS picked (or was forced onto) a generic core on a CPU with AVX-512 (SkylakeX) or
// AVX2 (Haswell). A user's non-generic choice is kept. Pure: the launcher's decision, unit-tested.
std::optional<std::string> openblas_coretype_override(const std::string& loaded_core, const std::string& user_value,
                                                      bool cpu_has_avx512, bool cpu_has_avx2);

// The same decision for this process and CPU (loads OpenBLAS if present; nothing when absent).
std::optional<std::string> openblas_coretype_for_workers();

}  // namespace spmd::kernels::cpu
