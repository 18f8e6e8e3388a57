// The one entry into lib/kernels: each function picks, by device and dtype, a fused CPU kernel
// (kernels/cpu) or libtorch's device-generic ops (CUDA, other dtypes), so callers never branch
// on what a kernel supports. Kernels know nothing about meshes or the model.
#pragma once
#include <string>

#include <ATen/ATen.h>

#include "config/choices.h"  // MatmulDtype and CpuKernels only: no config, no dependencies
#include "kernels/attention_block.h"
#include "kernels/dropout_draws.h"

namespace spmd::kernels {

// ---- Which kernels a CPU runs ----

// runtime.cpu_kernels for this process (fused until set): generic turns every fused CPU kernel
// off, so a CPU runs the ops a GPU runs (the GPU's code path, for tests and the census).
void use_cpu_kernels(CpuKernels kernels);
// Whether `device` takes the device-generic path: any GPU, and a CPU set to generic kernels.
// There the products take model.matmul_dtype as asked, and the training step decides its update
// on the device without reading numbers back (AdamW::step_on_device).
bool takes_generic_path(c10::Device device);

// ---- Dense products ----

// The operand dtype of a model.matmul_dtype.
at::ScalarType matmul_operand_dtype(MatmulDtype dtype);
// The same on `device`: float32 on a CPU whose bf16 products are slower than float32 ones
// (cpu::bf16_products: emulated without bf16 instructions, or AVX512_BF16 alone on an Intel core).
at::ScalarType matmul_operand_dtype(MatmulDtype dtype, c10::Device device);
// Whether a bfloat16 model.matmul_dtype runs in bf16 on `device` (else float32), and why, for
// the runtime line.
std::string matmul_dtype_note(MatmulDtype dtype, c10::Device device);

// x (rows, K) w (K, N) (+ bias (N)), autograd-aware; w may be the transpose of a row-major
// matrix (a tied (N, K) embedding as the LM head). With a reduced `operand_dtype` (bfloat16:
// model.matmul_dtype) the product has autocast's semantics: x, w and bias are taken in that dtype
// (a no-op for operands already in it: callers pass weights cast once per step), the bias rides
// in addmm, and the result is in the operand dtype (libtorch's mm accumulates in float32: oneDNN's
// bf16 GEMM on CPUs with AVX512_BF16 / AMX, cuBLAS on GPUs); the gradients flow back in it too.
at::Tensor dense_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias = at::Tensor(),
                         at::ScalarType operand_dtype = at::kFloat);

// x (rows, K) times weights (K, N_i) side by side -> (rows, sum N_i): the projections that read one
// input as one product (q, k, v; gate, up), as dense_product of the weights concatenated along N.
// On a CPU in float32 one node whose backward reads dY's column blocks in place (no weight-shaped
// gradient sliced and copied); elsewhere the concatenated weight through dense_product.
at::Tensor side_by_side_product(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                at::ScalarType operand_dtype = at::kFloat);

// The same products without autograd, for nodes with their own backward (an FSDP layer gathers
// its weight again there instead of keeping it). bias may be undefined.
at::Tensor linear_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                          at::ScalarType operand_dtype = at::kFloat);
// With a reduced operand dtype the backward's products run in it; dx comes back in x's dtype,
// dw and dbias in float32 (the master weights').
struct LinearGrads {
  at::Tensor dx, dw, dbias;  // undefined where not asked for; dw has w's layout
};
LinearGrads linear_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& dy, bool need_dx,
                            bool need_dw, bool need_dbias, at::ScalarType operand_dtype = at::kFloat);
// dw += x^T dy in place: the weight gradient of x (rows, K) w (K, N) summed over calls (chunks of
// rows of one product) with no w-sized temporary in float32. dw: float32, (K, N) in w's layout (a
// transposed view for a tied (N, K) table). bf16 operands: on an Intel CPU with MKL (the x86 wheel)
// one bf16 GEMM accumulating in float32 into dw; elsewhere each call's product is rounded to bf16,
// as linear_backward's, then added (a bf16 temporary of w's size).
void accumulate_weight_grad(const at::Tensor& dw, const at::Tensor& x, const at::Tensor& dy,
                            at::ScalarType operand_dtype = at::kFloat);

// ---- Products with a float32 result (the GPU's LM head) ----

// x (n, K) w (K, N) -> (n, N) float32: with reduced-precision operands (bf16) accumulated in
// float32 and never rounded to their dtype: at::mm's out_dtype on CUDA (one cuBLAS call), the
// CPU stand-in of the same numerics elsewhere (kernels/gpu_stand_ins.h). No autograd.
at::Tensor product_float_out(const at::Tensor& x, const at::Tensor& w);
// acc += alpha x w, acc float32 (K, N) (or the transpose of a contiguous (N, K): a tied table's
// gradient), the product accumulated into it in float32 by the product itself: no temporary of
// acc's size and no separate add. No autograd.
void add_product_float_out(const at::Tensor& acc, const at::Tensor& x, const at::Tensor& w, double alpha);

// ---- The LM head's loss ----

struct SoftmaxCrossEntropy {
  at::Tensor losses;  // (n,) float32, 0 where the target is negative
  at::Tensor grad;    // (n, V) softmax - one_hot (the softmax alone where the target is negative), or undefined
};
// Each row's cross-entropy from float32 logits (n, V) whose columns >= valid are padding, against
// targets (n,) int64; with `grad` also its gradient, rounded once to grad_dtype. A bf16 gradient
// on CUDA: one kernel of our own (kernels/cuda/softmax_cross_entropy.cuh) that reads the logits
// for the loss and again for the gradient and writes nothing else of their size; elsewhere its
// stand-in (kernels/gpu_stand_ins.h), the same numbers from libtorch ops.
SoftmaxCrossEntropy softmax_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t valid,
                                          bool grad, at::ScalarType grad_dtype);

// ---- The residual stream and its norms ----

struct ResidualNormed {
  at::Tensor sum;     // x + delta, float32: the residual stream from here on
  at::Tensor normed;  // norm(sum) in the operand dtype asked for: the next products' input
};
// A pre-norm block's `sum = x + delta` and norm(sum) as one op, autograd-aware (residual_norm.cpp):
// x (..., C) float32, delta float32 or bf16 or undefined (then the sum is x itself: a block's first
// norm, whose gradient then joins the residual's in the same pass, with no separate add); LayerNorm with weight and bias (undefined: none) or,
// with `rms`, RMSNorm with weight alone; statistics in float32. On a GPU one kernel each way
// (kernels/cuda/residual_norm.cuh): forward reads x and delta once and writes the sum and the
// normed rows; backward adds the norm's gradient to the residual's and writes the branch's
// gradient in its dtype in the same pass. On a CPU taking the fused kernels, RMSNorm without a
// bias is one pass each way too (kernels/cpu/fused_rms_norm.h). Elsewhere the CPU stand-in of the
// same numbers.
ResidualNormed residual_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                             const at::Tensor& bias, double eps, bool rms, at::ScalarType out_dtype);

// ---- Attention and activation ----

// softmax(Q K^T / sqrt(D) + causal mask) V for qkv (B, T, 3, H, D) -> y (B, T, H, D).
// dropout_mask: undefined, or (B, H, T, T) multipliers of the probabilities (0 or 1/(1-p)):
// y = (softmax(...) * dropout_mask) V, so dropout is the caller's pure function of global indices
// on every device. operand_dtype: bf16 (the model's matmul dtype) takes qkv's bf16 values and
// returns y in bf16, as autocast does: on CUDA libtorch's flash kernels on bf16 operands (softmax
// in float32 inside), on the CPU the fused kernel, float32 on their values (it keeps the bf16 qkv
// and the probabilities for backward); float32 changes nothing.
// document_starts: undefined, or (B, T) int64, where each position's document starts (packed
// documents; non-decreasing along a row, <= the position): query i sees keys
// document_starts[b, i] .. i only (a block-diagonal causal mask).
at::Tensor causal_attention(const at::Tensor& qkv, const at::Tensor& dropout_mask = at::Tensor(),
                            at::ScalarType operand_dtype = at::kFloat,
                            const at::Tensor& document_starts = at::Tensor());
// The same with the mask as its draws (kernels/dropout_draws.h; undefined: no dropout), the same
// bits: the CPU's fused kernel draws each head's multipliers where it applies them and keeps none
// for backward; every other path materializes the mask on qkv's device first.
at::Tensor causal_attention(const at::Tensor& qkv, const DropoutDraws& dropout, at::ScalarType operand_dtype,
                            const at::Tensor& document_starts = at::Tensor());

// Decoding: queries q (B, T, H, D) at the last T of the S positions whose keys and values k, v
// (B, S, H, D) hold; query i sees keys 0 .. S - T + i. No dropout. (B, T, H, D).
at::Tensor attention_over_prefix(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// Causal attention of queries at arbitrary positions over keys in sequence order: q (B, T, H, D)
// whose query i sits at position q_positions[i] (int64, (T,)), k and v (B, S, H, D) at positions
// 0 .. S-1; query i sees keys 0 .. q_positions[i]. dropout_mask: undefined or (B, H, T, S)
// multipliers of the probabilities, as in causal_attention. q_document_starts: undefined, or
// (B, T) int64, the document start of each query (packed documents): query i then sees keys
// q_document_starts[b, i] .. q_positions[i] only. (B, T, H, D).
at::Tensor attention_at_positions(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& q_positions, const at::Tensor& dropout_mask = at::Tensor(),
                                  const at::Tensor& q_document_starts = at::Tensor());

// One block of attention (attention_block.h): each query's softmax over the keys it sees, for a
// caller that merges blocks by their log-sum-exp (ring attention). No autograd. The fused CPU
// kernel computes only the visible keys' scores; elsewhere the masked scores are -inf.
BlockAttention block_attention(const AttentionBlock& block);

// Its backward inside the whole attention (flash attention's): P = exp(S - lse), dV += (P m)^T dO,
// dS = P (dO V^T m - row_dot) / sqrt(D), dQ += dS K, dK += dS^T Q (m: the dropout multipliers).
void block_attention_backward(const AttentionBlock& block, const BlockGradients& g);

// GPT-2's tanh-approximate GELU of h + bias; bias undefined or of size h.size(-1). A bf16 h gives
// bf16 (the bias taken in bf16, as autocast); other dtypes promote as libtorch's add does.
at::Tensor bias_gelu(const at::Tensor& h, const at::Tensor& bias = at::Tensor());

// x times the draws' multipliers (0 or 1/(1-p); undefined draws: x itself), a block of x's shape.
// float32 or bf16 x on the CPU: one pass, the multipliers drawn again in backward, nothing kept
// (float32 out, as bf16 x * float32 mask promotes); elsewhere
// x * draws.materialize(x.device()), which autograd keeps. The same bits either way.
at::Tensor dropout(const at::Tensor& x, const DropoutDraws& draws);

// Llama's SwiGLU: silu(gate) * up, elementwise. On the device-generic path one op each way
// (pointwise.cpp: a kernel of our own on a GPU, kernels/cuda/pointwise.cuh; the CPU stand-in
// elsewhere), computed in float32 and rounded once; on a CPU one pass each way too
// (kernels/cpu/fused_swiglu.h).
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);
// The same of gate_up (..., 2 F) = [gate | up] along the last dim (the gate and up product's
// output) -> (..., F); its gradient comes back in that layout. On a CPU one pass each way
// (kernels/cpu/fused_swiglu.h), no halves copied out; elsewhere swiglu of the two halves.
at::Tensor swiglu_halves(const at::Tensor& gate_up);

// Rotary embeddings: x (B, T, H, D) rotated by the angles whose cos and sin are float32
// (P, T, 1, D), P 1 or B: x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1], computed in
// float32 and returned in x's dtype; autograd-aware (the backward rotates back). One kernel each
// way on a GPU (kernels/cuda/pointwise.cuh), the CPU stand-in of the same numbers elsewhere.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// Grouped-query attention's input in the layout its kernel reads: qkv (B, T, H + 2 Hkv, D) (query
// heads, key heads, value heads: the q, k, v product's output) with its query and key heads
// rotated as rotary() rotates them, in qkv's dtype; autograd-aware. On a CPU one pass each way
// (kernels/cpu/fused_rotary.h, apply_rope's bits); elsewhere rotary on each and cat.
at::Tensor rotary_pack(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos, const at::Tensor& sin);

// Causal attention of a packed (B, T, H + 2 Hkv, D) qkv (rotary_pack's) in which query head h
// reads key/value head h / (H / Hkv) -> (B, T, H, D); dropout as (B, H, T, T) draws, operand_dtype
// and document_starts as causal_attention's. The CPU's fused kernel reads each key/value head for
// its query heads, never repeated (its gradient sums theirs in place); elsewhere the key/value
// heads are repeated into (B, T, 3, H, D) for causal_attention.
at::Tensor grouped_causal_attention(const at::Tensor& packed, int64_t kv_heads, const DropoutDraws& dropout,
                                    at::ScalarType operand_dtype, const at::Tensor& document_starts = at::Tensor());

// RMSNorm over x's last dim: x / sqrt(mean(x^2) + eps) * weight, the statistics in float32
// whatever x's dtype (as Hugging Face's LlamaRMSNorm); weight of size x.size(-1).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// ---- Optimizer and norms ----

// One AdamW step's numbers for one parameter.
struct AdamWScalars {
  double lr = 0;            // this step's learning rate
  double weight_decay = 0;  // decoupled decay for this parameter; 0: none
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double bias1 = 1, bias2 = 1;  // 1 - beta1^t, 1 - beta2^t
  double grad_scale = 1;        // g is used multiplied by this (the clipping factor; g unchanged)
};

// In place: m = beta1 m + (1 - beta1) g', v = beta2 v + (1 - beta2) g'^2 (g' = grad_scale g), then
// p = p (1 - lr weight_decay) - (lr / bias1) m / (sqrt(v / bias2) + eps). No autograd (call under
// NoGradGuard). The fused CPU form and the op-by-op form do the same operations in the same order.
void adamw_update(at::Tensor& p, const at::Tensor& g, at::Tensor& m, at::Tensor& v, const AdamWScalars& s);

// sum(t^2) accumulated in double, as a 0-dim float64 tensor on t's device (no host sync).
at::Tensor sum_of_squares(const at::Tensor& t);

// The sum of sum(t^2) over `tensors` (all on `device`), accumulated in double, as a 0-dim float64
// tensor on `device`: the fused loop on the CPU, one foreach norm elsewhere (no float64 copies).
at::Tensor sum_of_squares(const std::vector<at::Tensor>& tensors, c10::Device device);

}  // namespace spmd::kernels
