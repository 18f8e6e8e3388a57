// kernels::rotary_pack and kernels::grouped_causal_attention (kernels.h): the CPU's fused kernels
// (kernels/cpu/fused_rotary.h, fused_attention.h), and elsewhere the same numbers from the
// device-generic ops: the query and key heads each rotated, then packed again; the key/value
// heads repeated into the (B, T, 3, H, D) layout causal_attention takes.
#include <ATen/ATen.h>

#include "kernels/cpu/fused_attention.h"
#include "kernels/cpu/fused_rotary.h"
#include "kernels/kernels.h"

namespace spmd::kernels {

namespace {
// (B, T, Hkv, D) heads repeated to the H query heads they serve: query head i reads head i / (H / Hkv).
at::Tensor repeat_heads(const at::Tensor& kv, int64_t heads) {
  const int64_t group = heads / kv.size(2);
  if (group == 1) return kv;
  const auto s = kv.sizes();
  return kv.unsqueeze(3).expand({s[0], s[1], s[2], group, s[3]}).reshape({s[0], s[1], heads, s[3]});
}
}  // namespace

at::Tensor rotary_pack(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos, const at::Tensor& sin) {
  if (!takes_generic_path(qkv.device()) && cpu::fused_rotary_supports(qkv, kv_heads, cos, sin))
    return cpu::fused_rotary_pack(qkv, kv_heads, cos, sin);
  const int64_t H = qkv.size(2) - 2 * kv_heads;
  return at::cat({rotary(qkv.narrow(2, 0, H), cos, sin), rotary(qkv.narrow(2, H, kv_heads), cos, sin),
                  qkv.narrow(2, H + kv_heads, kv_heads)},
                 2);
}

at::Tensor grouped_causal_attention(const at::Tensor& packed, int64_t kv_heads, const DropoutDraws& dropout,
                                    at::ScalarType operand_dtype, const at::Tensor& document_starts) {
  const at::Tensor operands = c10::isReducedFloatingType(operand_dtype) && operand_dtype != packed.scalar_type()
                                  ? packed.to(operand_dtype)
                                  : packed;
  if (!takes_generic_path(packed.device()) && cpu::fused_grouped_attention_supports(operands, kv_heads, document_starts))
    return cpu::fused_grouped_attention(operands, kv_heads, dropout, document_starts);
  const int64_t H = packed.size(2) - 2 * kv_heads;
  const at::Tensor qkv = at::stack({operands.narrow(2, 0, H), repeat_heads(operands.narrow(2, H, kv_heads), H),
                                    repeat_heads(operands.narrow(2, H + kv_heads, kv_heads), H)},
                                   2);  // (B, T, 3, H, D)
  return causal_attention(qkv, dropout, operand_dtype, document_starts);
}

}  // namespace spmd::kernels
