// What the host CPU's instruction set offers the kernels (read from /proc/cpuinfo once).
#pragma once

namespace spmd::kernels::cpu {

// True when the CPU multiplies bfloat16 natively (AVX512_BF16 or AMX-BF16): oneDNN's bf16 GEMM
// then runs at about twice the float32 rate; without them bf16 matmuls are emulated and slower
// than float32.
bool has_bf16_instructions();

}  // namespace spmd::kernels::cpu
