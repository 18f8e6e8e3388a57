#include "parallel/param_cast_cache.h"

#include <ATen/core/grad_mode.h>

namespace spmd {

at::Tensor ParamCastCache::get(size_t i, const at::Tensor& param, at::ScalarType dtype) {
  if (param.scalar_type() == dtype) return param;
  if (entries_.size() <= i) entries_.resize(i + 1);
  Entry& e = entries_[i];
  const bool with_grad = at::GradMode::is_enabled() && param.requires_grad();
  const int64_t version = param._version();
  const void* source = param.unsafeGetTensorImpl();
  const bool stale = !e.copy.defined() || e.source != source || e.copy.scalar_type() != dtype ||
                     e.version != version || e.with_grad != with_grad;
  if (stale) {
    e.copy = param.to(dtype);
    e.source = source;
    e.version = version;
    e.with_grad = with_grad;
  }
  return e.copy;
}

}  // namespace spmd
