// The dispatch: a fused CPU kernel where it takes the operands, libtorch's device-generic ops
// elsewhere. The generic forms are the fused kernels' references (tests/unit/test_kernels_dispatch).
#include "kernels/kernels.h"

#include <atomic>
#include <cmath>
#include <vector>

#include <ATen/ops/_foreach_norm.h>
#include <fmt/ranges.h>

#include "kernels/cpu/bf16_gemm.h"
#include "kernels/cpu/block_attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fused_adamw.h"
#include "kernels/cpu/fused_attention.h"
#include "kernels/cpu/fused_dropout.h"
#include "kernels/cpu/fused_gelu.h"
#include "kernels/cpu/fused_linear.h"
#include "kernels/cpu/sum_of_squares.h"
#include "kernels/cuda_module.h"
#include "kernels/gpu_stand_ins.h"
#include "util/error.h"

namespace spmd::kernels {

// ---- Which kernels a CPU runs ----

namespace {
std::atomic<CpuKernels> g_cpu_kernels{CpuKernels::kFused};

// Whether the fused CPU kernels may run at all; each still checks its operands (cpu::*_supports).
bool fused_cpu() { return g_cpu_kernels.load(std::memory_order_relaxed) == CpuKernels::kFused; }
}  // namespace

void use_cpu_kernels(CpuKernels kernels) { g_cpu_kernels.store(kernels, std::memory_order_relaxed); }

bool takes_generic_path(c10::Device device) { return !device.is_cpu() || !fused_cpu(); }

// ---- Dense products ----

namespace {
// Autocast's product: operands in `dtype` (no copy for those already in it), bias in addmm, the
// result in `dtype`; autograd-aware.
at::Tensor reduced_precision_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                     at::ScalarType dtype) {
  const at::Tensor xr = x.to(dtype), wr = w.to(dtype);
  return bias.defined() ? at::addmm(bias.to(dtype), xr, wr) : at::mm(xr, wr);
}
}  // namespace

at::ScalarType matmul_operand_dtype(MatmulDtype dtype) {
  return dtype == MatmulDtype::kBFloat16 ? at::kBFloat16 : at::kFloat;
}

at::ScalarType matmul_operand_dtype(MatmulDtype dtype, c10::Device device) {
  if (!takes_generic_path(device) && !cpu::takes_bf16_products()) return at::kFloat;
  return matmul_operand_dtype(dtype);
}

std::string matmul_dtype_note(MatmulDtype dtype, c10::Device device) {
  if (device.is_cpu() && takes_generic_path(device))
    return "matmuls " + name_of(dtype) + "; CPU kernels generic (runtime.cpu_kernels: the GPU's code path)";
  if (dtype != MatmulDtype::kBFloat16) return "matmuls float32";
  if (!device.is_cpu()) return "matmuls bfloat16";
  switch (cpu::bf16_products()) {
    case cpu::Bf16Products::kFaster: return "matmuls bfloat16 (CPU has " + cpu::bf16_products_flag() + ")";
    case cpu::Bf16Products::kSlower:
      return "matmuls float32: model.matmul_dtype bfloat16 asked, but this Intel CPU has avx512_bf16 without "
             "amx_bf16, where bf16 products run at about half the float32 rate";
    case cpu::Bf16Products::kEmulated: break;
  }
  return "matmuls float32: model.matmul_dtype bfloat16 asked, but this CPU lacks bf16 instructions (no avx512_bf16 "
         "or amx_bf16 in /proc/cpuinfo), where bf16 products would be slower than float32";
}

at::Tensor dense_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                         at::ScalarType operand_dtype) {
  if (operand_dtype == at::kFloat && fused_cpu() && cpu::fused_linear_supports(x, w)) return cpu::fused_linear(x, w, bias);
  return linear_forward(x, w, bias, operand_dtype);  // here only libtorch ops, which autograd records
}

at::Tensor side_by_side_product(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                at::ScalarType operand_dtype) {
  if (operand_dtype == at::kFloat && fused_cpu() && cpu::side_by_side_linear_supports(x, weights))
    return cpu::side_by_side_linear(x, weights);
  return dense_product(x, at::cat(weights, 1), at::Tensor(), operand_dtype);
}

at::Tensor linear_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                          at::ScalarType operand_dtype) {
  if (c10::isReducedFloatingType(operand_dtype)) return reduced_precision_product(x, w, bias, operand_dtype);
  if (fused_cpu() && cpu::fused_linear_supports(x, w)) return cpu::fused_linear_forward(x, w, bias);
  return bias.defined() ? at::addmm(bias, x, w) : at::mm(x, w);
}

LinearGrads linear_backward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& dy, bool need_dx,
                            bool need_dw, bool need_dbias, at::ScalarType operand_dtype) {
  LinearGrads g;
  if (c10::isReducedFloatingType(operand_dtype)) {
    const at::Tensor dy_r = dy.to(operand_dtype);
    if (need_dx) g.dx = at::mm(dy_r, w.to(operand_dtype).t()).to(x.scalar_type());
    if (need_dw) g.dw = at::mm(x.to(operand_dtype).t(), dy_r).to(w.scalar_type());
    if (need_dbias) g.dbias = dy.sum(0).to(at::kFloat);  // as addmm's backward: a bf16 sum (float32 inside)
    return g;
  }
  if (fused_cpu() && cpu::fused_linear_supports(x, w)) {
    g = cpu::fused_linear_backward(x, w, dy, need_dx, need_dw);
  } else {
    if (need_dx) g.dx = at::mm(dy, w.t());
    if (need_dw) g.dw = at::mm(x.t(), dy);
  }
  if (need_dbias) g.dbias = dy.sum(0);
  return g;
}

void accumulate_weight_grad(const at::Tensor& dw, const at::Tensor& x, const at::Tensor& dy,
                            at::ScalarType operand_dtype) {
  if (c10::isReducedFloatingType(operand_dtype)) {  // x and dy may already be in it (bf16 activations)
    const at::Tensor xr = x.to(operand_dtype), dyr = dy.to(operand_dtype);
    if (operand_dtype == at::kBFloat16 && fused_cpu() && dw.is_cpu() && dw.scalar_type() == at::kFloat && cpu::has_bf16_gemm()) {
      cpu::bf16_accumulate_weight_grad(dw, xr, dyr);  // one GEMM accumulating in float32 into dw
      return;
    }
    // The product in dw's own layout, so that the add is one contiguous pass: added through a
    // transposed view (a tied table's (N, K)), it cost 45 ms a chunk on GPT-2's head on a CPU.
    if (!dw.is_contiguous() && dw.t().is_contiguous())
      dw.t().add_(at::mm(dyr.t(), xr));
    else
      dw.add_(at::mm(xr.t(), dyr));
  } else if (fused_cpu() && cpu::fused_linear_supports(x, dw) && dy.device().is_cpu() && dy.scalar_type() == at::kFloat) {
    cpu::fused_accumulate_weight_grad(dw, x, dy);
  } else {
    dw.addmm_(x.t(), dy);
  }
}

// ---- Products with a float32 result (the GPU's LM head) ----

namespace {
bool both_float(const at::Tensor& x, const at::Tensor& w) {
  return x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat;
}
}  // namespace

at::Tensor product_float_out(const at::Tensor& x, const at::Tensor& w) {
  if (both_float(x, w)) return at::mm(x, w);
  if (x.is_cuda()) return at::mm(x, w, at::kFloat);
  return gpu_stand_in::mm_float_out(x, w);
}

void add_product_float_out(const at::Tensor& acc, const at::Tensor& x, const at::Tensor& w, double alpha) {
  SPMD_ASSERT(acc.scalar_type() == at::kFloat, "add_product_float_out: a float32 accumulator, got {}",
              c10::toString(acc.scalar_type()));
  if (!acc.is_contiguous() && acc.t().is_contiguous()) {  // (acc^T += alpha w^T x^T): one pass in its own layout
    add_product_float_out(acc.t(), w.t(), x.t(), alpha);
    return;
  }
  at::Tensor out = acc;  // a handle: the _out ops take a non-const reference
  if (both_float(x, w)) out.addmm_(x, w, 1.0, alpha);
  else if (acc.is_cuda()) at::addmm_out(out, acc, x, w, at::kFloat, 1.0, alpha);
  else gpu_stand_in::addmm_float_out(acc, x, w, alpha);
}

// ---- The LM head's loss ----

SoftmaxCrossEntropy softmax_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t valid,
                                          bool grad, at::ScalarType grad_dtype) {
  SPMD_ASSERT(logits.dim() == 2 && logits.scalar_type() == at::kFloat && targets.numel() == logits.size(0),
              "softmax_cross_entropy: float32 (n, V) logits and n targets, got {} {} and {}", logits.sizes().vec(),
              c10::toString(logits.scalar_type()), targets.numel());
  if (logits.is_cuda() && (!grad || grad_dtype == at::kBFloat16) && logits.stride(1) == 1) {
    SoftmaxCrossEntropy out{at::empty({logits.size(0)}, logits.options()),
                            grad ? at::empty(logits.sizes(), logits.options().dtype(at::kBFloat16)) : at::Tensor()};
    spmd::cuda::module().softmax_cross_entropy(logits, targets.contiguous(), valid, out.losses, out.grad);
    return out;
  }
  auto [losses, g] = gpu_stand_in::softmax_cross_entropy(logits, targets, valid, grad, grad_dtype);
  return {losses, g};
}

// ---- Attention and activation ----

namespace {
// Q, K, V as (B, H, T, D) views of qkv (B, T, 3, H, D). One unbind, not three selects: its
// backward stacks the three gradients in one pass, where each select's would zero a qkv-sized
// tensor, copy its gradient in and add it to the others'.
struct HeadMajor {
  at::Tensor q, k, v;
};
HeadMajor head_major(const at::Tensor& qkv) {
  const std::vector<at::Tensor> parts = qkv.unbind(2);
  return {parts[0].transpose(1, 2), parts[1].transpose(1, 2), parts[2].transpose(1, 2)};
}

// The keys each query may not see, (T, S) or, with document starts (B, T), (B, 1, T, S): those
// after the query's position and, in packed documents, those before its document's start.
at::Tensor hidden_keys(const at::Tensor& q_positions, int64_t S, const at::Tensor& document_starts) {
  const at::Tensor keys = at::arange(S, q_positions.options());
  at::Tensor hidden = keys.unsqueeze(0) > q_positions.unsqueeze(1);  // (T, S): a later key
  if (!document_starts.defined()) return hidden;
  const at::Tensor earlier_document = keys.view({1, 1, S}) < document_starts.unsqueeze(-1);  // (B, T, S)
  return (hidden.unsqueeze(0) | earlier_document).unsqueeze(1);
}

// The explicit computation: scores, causal (and document) mask, softmax, (dropout,) times V.
// (B, T, H, D).
at::Tensor explicit_causal_attention(const at::Tensor& qkv, const at::Tensor& dropout_mask,
                                     const at::Tensor& document_starts) {
  const int64_t T = qkv.size(1), D = qkv.size(4);
  const auto [q, k, v] = head_major(qkv);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));  // (B, H, T, T)
  const at::Tensor hidden =
      document_starts.defined()
          ? hidden_keys(at::arange(T, qkv.options().dtype(at::kLong)), T, document_starts)
          : at::ones({T, T}, qkv.options().dtype(at::kBool)).triu(1);
  // The softmax in float32 for bf16 operands (as autocast does), else in their own dtype.
  const at::ScalarType softmax_dtype =
      c10::isReducedFloatingType(scores.scalar_type()) ? at::kFloat : scores.scalar_type();
  at::Tensor probs = at::softmax(scores.masked_fill(hidden, -INFINITY), -1, softmax_dtype);
  if (dropout_mask.defined()) probs = probs * dropout_mask;  // the mask is float32
  return at::matmul(probs.to(v.scalar_type()), v).transpose(1, 2);
}
}  // namespace

at::Tensor causal_attention(const at::Tensor& qkv, const at::Tensor& dropout_mask, at::ScalarType operand_dtype,
                            const at::Tensor& document_starts) {
  SPMD_ASSERT(qkv.dim() == 5 && qkv.size(2) == 3, "causal_attention: qkv must be (B, T, 3, H, D), got {}",
              qkv.sizes().vec());
  SPMD_ASSERT((!document_starts.defined() || document_starts.sizes() == at::IntArrayRef({qkv.size(0), qkv.size(1)})),
              "causal_attention: document starts {} for qkv {}", document_starts.sizes().vec(), qkv.sizes().vec());
  // Reduced-precision operands (bf16): attention on them, the result bf16 for the projection after
  // it. On the CPU the fused kernel (float32 on their bf16 values: libtorch's CPU flash attention on
  // bf16 took 1243 ms of a 4.3 s 10.7M step on an AMD Zen 4, bench/NOTES.md); on CUDA libtorch's
  // flash kernels (softmax in float32 inside, as autocast runs it).
  if (c10::isReducedFloatingType(operand_dtype) && operand_dtype != qkv.scalar_type())
    return causal_attention(qkv.to(operand_dtype), dropout_mask, operand_dtype, document_starts);
  if (fused_cpu() && cpu::fused_attention_supports(qkv, dropout_mask, document_starts))
    return cpu::fused_causal_attention(qkv, dropout_mask, document_starts);
  // libtorch's fused attention (flash / memory-efficient on CUDA; packed documents as a boolean
  // mask of the keys taking part). Its own dropout is not a function of global indices, so a
  // mask takes the explicit path.
  if (!dropout_mask.defined()) {
    const auto [q, k, v] = head_major(qkv);
    if (!document_starts.defined())
      return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true).transpose(1, 2);
    const int64_t T = qkv.size(1);
    const at::Tensor visible = ~hidden_keys(at::arange(T, document_starts.options()), T, document_starts);
    return at::scaled_dot_product_attention(q, k, v, visible, 0.0, /*is_causal=*/false).transpose(1, 2);
  }
  return explicit_causal_attention(qkv, dropout_mask, document_starts);
}

at::Tensor causal_attention(const at::Tensor& qkv, const DropoutDraws& dropout, at::ScalarType operand_dtype,
                            const at::Tensor& document_starts) {
  const at::Tensor operands =
      c10::isReducedFloatingType(operand_dtype) && operand_dtype != qkv.scalar_type() ? qkv.to(operand_dtype) : qkv;
  if (fused_cpu() && cpu::fused_attention_supports(operands, at::Tensor(), document_starts))
    return cpu::fused_causal_attention(operands, dropout, document_starts);
  const at::Tensor mask = dropout.defined() ? dropout.materialize(qkv.device()) : at::Tensor();
  return causal_attention(operands, mask, operand_dtype, document_starts);
}

at::Tensor attention_over_prefix(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t T = q.size(1), S = k.size(1), D = q.size(3);
  SPMD_ASSERT(S >= T && k.sizes() == v.sizes(), "attention_over_prefix: q {} k {} v {}", q.sizes().vec(),
              k.sizes().vec(), v.sizes().vec());
  const at::Tensor qh = q.transpose(1, 2), kh = k.transpose(1, 2), vh = v.transpose(1, 2);  // (B, H, ., D)
  at::Tensor scores = at::matmul(qh, kh.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));  // (B, H, T, S)
  at::Tensor hidden = at::ones({T, S}, q.options().dtype(at::kBool)).triu(S - T + 1);  // key j > S - T + i
  return at::matmul(at::softmax(scores.masked_fill(hidden, -INFINITY), -1), vh).transpose(1, 2);
}

at::Tensor attention_at_positions(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& q_positions, const at::Tensor& dropout_mask,
                                  const at::Tensor& q_document_starts) {
  const int64_t T = q.size(1), S = k.size(1), D = q.size(3);
  SPMD_ASSERT(k.sizes() == v.sizes() && q_positions.numel() == T, "attention_at_positions: q {} k {} v {} positions {}",
              q.sizes().vec(), k.sizes().vec(), v.sizes().vec(), q_positions.numel());
  SPMD_ASSERT((!q_document_starts.defined() || q_document_starts.sizes() == at::IntArrayRef({q.size(0), T})),
              "attention_at_positions: document starts {} for q {}", q_document_starts.sizes().vec(), q.sizes().vec());
  const at::Tensor qh = q.transpose(1, 2), kh = k.transpose(1, 2), vh = v.transpose(1, 2);  // (B, H, ., D)
  at::Tensor scores = at::matmul(qh, kh.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));  // (B, H, T, S)
  const at::Tensor hidden = hidden_keys(q_positions, S, q_document_starts);  // (T, S) or (B, 1, T, S)
  at::Tensor probs = at::softmax(scores.masked_fill(hidden, -INFINITY), -1);
  if (dropout_mask.defined()) probs = probs * dropout_mask;
  return at::matmul(probs, vh).transpose(1, 2);
}

namespace {
// A block's scores Q K^T / sqrt(D), -inf where a query may not see a key: (B, H, n, m).
at::Tensor masked_block_scores(const AttentionBlock& b) {
  const int64_t n = b.q.size(2), m = b.k.size(2);
  at::Tensor s = at::matmul(b.q, b.k.transpose(-2, -1)).mul_(1.0 / std::sqrt(static_cast<double>(b.q.size(3))));
  const auto positions = b.q.options().dtype(at::kLong);
  const at::Tensor keys = at::arange(b.k_begin, b.k_begin + m, positions);
  if (b.k_begin + m - 1 > b.q_begin)  // some key after some query
    s.masked_fill_(keys.unsqueeze(0) > at::arange(b.q_begin, b.q_begin + n, positions).unsqueeze(1), -INFINITY);
  if (b.q_document_starts.defined())
    s.masked_fill_((keys.view({1, 1, m}) < b.q_document_starts.unsqueeze(-1)).unsqueeze(1), -INFINITY);
  return s;
}
}  // namespace

BlockAttention block_attention(const AttentionBlock& block) {
  if (fused_cpu() && cpu::block_attention_supports(block)) return cpu::fused_block_attention(block);
  at::Tensor s = masked_block_scores(block);
  const at::Tensor lse = at::logsumexp(s, -1, true);
  // A query that sees no key here: lse -inf, probabilities 0 (not exp(-inf + inf)).
  at::Tensor p = s.sub_(lse.masked_fill(at::isinf(lse), 0)).exp_();
  if (block.dropout_mask.defined()) p.mul_(block.dropout_mask);
  return {at::matmul(p, block.v), lse};
}

void block_attention_backward(const AttentionBlock& block, const BlockGradients& g) {
  if (fused_cpu() && cpu::block_attention_supports(block, {g.d_out, g.lse, g.row_dot, g.dq, g.dk, g.dv})) {
    cpu::fused_block_attention_backward(block, g);
    return;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(block.q.size(3)));
  const at::Tensor& mask = block.dropout_mask;
  const at::Tensor p = masked_block_scores(block).sub_(g.lse).exp_();
  g.dv.add_(at::matmul((mask.defined() ? p * mask : p).transpose(-2, -1), g.d_out));
  at::Tensor dp = at::matmul(g.d_out, block.v.transpose(-2, -1));
  if (mask.defined()) dp.mul_(mask);
  const at::Tensor ds = p * (dp - g.row_dot);
  g.dq.add_(at::matmul(ds, block.k), scale);
  g.dk.add_(at::matmul(ds.transpose(-2, -1), block.q), scale);
}

at::Tensor bias_gelu(const at::Tensor& h, const at::Tensor& bias) {
  if (fused_cpu() && cpu::fused_gelu_supports(h, bias)) return cpu::fused_bias_gelu(h, bias);
  if (!bias.defined()) return at::gelu(h, "tanh");
  // A bf16 h takes its bias in bf16 (autocast's: it stays bf16); other dtypes promote as usual.
  return at::gelu(h + (c10::isReducedFloatingType(h.scalar_type()) ? bias.to(h.scalar_type()) : bias), "tanh");
}

at::Tensor dropout(const at::Tensor& x, const DropoutDraws& draws) {
  if (!draws.defined()) return x;
  if (fused_cpu() && cpu::fused_dropout_supports(x, draws)) return cpu::fused_dropout(x, draws);
  return x * draws.materialize(x.device());
}



at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

// ---- Optimizer and norms ----

void adamw_update(at::Tensor& p, const at::Tensor& g_in, at::Tensor& m, at::Tensor& v, const AdamWScalars& s) {
  if (fused_cpu() && cpu::fused_adamw_supports(p, g_in, m, v)) {
    cpu::fused_adamw_update(p, g_in, m, v, s);
    // Written through raw pointers: bump the version as an in-place op would, so copies keyed on
    // it (the bf16 weight cache) and autograd's saved-tensor checks see the update.
    p.unsafeGetTensorImpl()->bump_version();
    return;
  }
  const at::Tensor g = s.grad_scale != 1.0 ? g_in * s.grad_scale : g_in;
  if (s.weight_decay != 0) p.mul_(1.0 - s.lr * s.weight_decay);
  m.mul_(s.beta1).add_(g, 1.0 - s.beta1);
  v.mul_(s.beta2).addcmul_(g, g, 1.0 - s.beta2);
  const at::Tensor denom = (v / s.bias2).sqrt_().add_(s.eps);
  p.addcdiv_(m, denom, -s.lr / s.bias1);
}

at::Tensor sum_of_squares(const at::Tensor& t) {
  // On the host the double is already there: wrap it rather than launch tensor ops.
  if (fused_cpu() && cpu::fused_sum_of_squares_supports(t)) return at::scalar_tensor(cpu::fused_sum_of_squares(t), at::kDouble);
  return t.to(at::kDouble).pow(2).sum();  // stays on t's device: no host sync
}

at::Tensor sum_of_squares(const std::vector<at::Tensor>& tensors, c10::Device device) {
  const auto options = at::TensorOptions().dtype(at::kDouble).device(device);
  if (tensors.empty()) return at::zeros({}, options);
  if (!takes_generic_path(device)) {
    double total = 0;
    for (const auto& t : tensors) total += sum_of_squares(t).item<double>();
    return at::scalar_tensor(total, options);
  }
  const std::vector<at::Tensor> norms = at::_foreach_norm(tensors, 2, at::kDouble);  // accumulated in double
  return at::stack(norms).square().sum();
}

}  // namespace spmd::kernels
