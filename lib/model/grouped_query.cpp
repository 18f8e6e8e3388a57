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

at::Tensor ModelOps::rotary_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& cos, const at::Tensor& sin, const std::string& dropout_site,
                                      const at::Tensor& document_starts) {
  const int64_t H = q.size(2);
  const at::Tensor qkv =
      at::stack({rotary(q, cos, sin), repeat_kv(rotary(k, cos, sin), H), repeat_kv(v, H)}, 2);  // (B, T, 3, H, D)
  return causal_attention(qkv, dropout_site, document_starts);
}

}  // namespace spmd
