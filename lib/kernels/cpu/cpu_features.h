// What the host CPU is and what its instruction set offers the kernels (read from /proc/cpuinfo).
#pragma once
#include <string>

namespace spmd::kernels::cpu {

// True when the CPU multiplies bfloat16 natively (AVX512_BF16 or AMX-BF16): oneDNN's bf16 GEMM
// then runs at about twice the float32 rate; without them bf16 matmuls are emulated and slower
// than float32.
bool has_bf16_instructions();

// /proc/cpuinfo's "vendor_id" ("GenuineIntel", "AuthenticAMD"; "" where there is none) and
// "model name" ("unknown CPU" where there is none).
std::string cpu_vendor();
std::string cpu_model();

}  // namespace spmd::kernels::cpu
