// What the host CPU is and what its instruction set offers the kernels (read from /proc/cpuinfo).
#pragma once
#include <string>

namespace spmd::kernels::cpu {

// True when the CPU multiplies bfloat16 natively (AVX512_BF16 or AMX-BF16); without them bf16
// matmuls are emulated. Whether they are then faster than float32 is bf16_products()'s to say.
bool has_bf16_instructions();

// How bf16 products compare with float32 ones on this CPU. Faster with AMX-BF16 (tiles), or with
// AVX512_BF16 on an AMD core, where one vdpbf16ps does twice an FMA's multiply-adds at the same
// rate. Slower with AVX512_BF16 alone on an Intel core (no AMX, or AMX the kernel does not enable):
// there bf16 products ran at ~0.55x float32's (bench/NOTES.md). Emulated without either flag.
enum class Bf16Products { kFaster, kSlower, kEmulated };
Bf16Products bf16_products();
// Whether a bfloat16 model.matmul_dtype runs its CPU products in bf16: only where they are faster.
inline bool takes_bf16_products() { return bf16_products() == Bf16Products::kFaster; }
// The flag that makes them faster ("amx_bf16", "avx512_bf16"); "" where they are not.
std::string bf16_products_flag();

// /proc/cpuinfo's "vendor_id" ("GenuineIntel", "AuthenticAMD"; "" where there is none) and
// "model name" ("unknown CPU" where there is none).
std::string cpu_vendor();
std::string cpu_model();

}  // namespace spmd::kernels::cpu
