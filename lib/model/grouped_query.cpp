// repeat_kv and ModelOps::rotary_attention's default: rotate, repeat, stack, attend.
#include "model/grouped_query.h"

#include "model/model_ops.h"

namespace spmd {

at::Tensor repeat_kv(const at::Tensor& kv, int64_t heads) {
  const int64_t group = heads / kv.size(2);
  if (group == 1) return kv;
  const auto s = kv.sizes();
  return kv.unsqueeze(3).expand({s[0], s[1], s[2], group, s[3]}).reshape({s[0], s[1], heads, s[3]});
}

at::Tensor ModelOps::rotary_attention(const at::Tensor& qkv, int64_t kv_heads, const at::Tensor& cos,
                                      const at::Tensor& sin, const std::string& dropout_site,
                                      const at::Tensor& document_starts) {
  const int64_t H = qkv.size(2) - 2 * kv_heads;
  const at::Tensor q = qkv.narrow(2, 0, H), k = qkv.narrow(2, H, kv_heads), v = qkv.narrow(2, H + kv_heads, kv_heads);
  return causal_attention(at::stack({rotary(q, cos, sin), repeat_kv(rotary(k, cos, sin), H), repeat_kv(v, H)}, 2),
                          dropout_site, document_starts);  // (B, T, 3, H, D)
}

}  // namespace spmd
