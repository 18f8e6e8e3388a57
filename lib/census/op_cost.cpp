// The op tables behind op_cost.h: which ops launch, which are products, and their FLOPs and bytes.
#include "census/op_cost.h"

#include <algorithm>
#include <set>

namespace spmd::census {

namespace {

// The name without its namespace ("aten::mm" -> "mm"); spmd::* keeps its own.
std::string_view bare(std::string_view name) {
  return name.substr(0, 6) == "aten::" ? name.substr(6) : name;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

const std::set<std::string_view, std::less<>> kMatmuls{
    "mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_", "addbmm", "addbmm_", "_addmm_activation",
    "mv", "addmv", "addmv_", "dot", "vdot", "_scaled_mm", "_int_mm"};

// One kernel each on a GPU whatever the CPU runs inside them.
const std::set<std::string_view, std::less<>> kAtomic{
    "native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward",
    "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
    "embedding_dense_backward"};

// No kernel: views, metadata, allocation (a copy they make is a child op and counts there).
const std::set<std::string_view, std::less<>> kFree{
    "view", "_unsafe_view", "reshape", "_reshape_alias", "_reshape_from_tensor", "t", "t_", "transpose",
    "transpose_", "permute", "expand", "expand_as", "select", "slice", "unbind", "split", "split_with_sizes",
    "unsafe_split", "chunk", "unsafe_chunk", "narrow", "as_strided", "as_strided_", "alias", "detach",
    "detach_", "squeeze", "squeeze_", "unsqueeze", "unsqueeze_", "flatten", "unflatten", "view_as",
    "contiguous", "movedim", "moveaxis", "swapaxes", "swapdims", "diagonal", "unfold", "mT", "numpy_T",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "resize_as_", "set_",
    "lift", "lift_fresh", "to", "type_as", "result_type", "can_cast", "promote_types", "is_same_size",
    "size", "stride", "numel", "dim", "is_contiguous", "is_floating_point", "is_complex", "is_pinned",
    "_version", "output_nr", "requires_grad_", "retain_grad", "_fw_primal", "_make_dual", "_unpack_dual",
    "resolve_conj", "resolve_neg", "conj", "_conj", "_neg_view", "real", "view_as_real", "view_as_complex",
    "_shape_as_tensor", "record_stream", "_fused_sdp_choice", "broadcast_tensors", "_has_compatible_shallow_copy_type",
    "_is_zerotensor", "align_to", "align_as", "refine_names", "rename"};

// Write their mutated argument without reading it.
const std::set<std::string_view, std::less<>> kWriteOnly{
    "copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_", "geometric_",
    "cauchy_", "log_normal_"};

// The aten product an spmd::* kernel stands for ("spmd::addmm_float_out" -> "addmm"), or "".
std::string_view product_analog(std::string_view name) {
  if (!starts_with(name, "spmd::")) return "";
  const std::string_view op = name.substr(6);
  for (std::string_view family : {"baddbmm", "addmm", "bmm", "mm"})
    if (starts_with(op, family) && (op.size() == family.size() || op[family.size()] == '_')) return family;
  return "";
}

// An spmd::* product's tensors named as its aten analog's schema names them (they come unnamed).
OpCall with_analog_names(OpCall call, std::string_view analog) {
  static const std::vector<std::string> kMm{"self", "mat2"}, kAddmm{"self", "mat1", "mat2"},
      kBaddbmm{"self", "batch1", "batch2"};
  const std::vector<std::string>& names = analog == "addmm" ? kAddmm : analog == "baddbmm" ? kBaddbmm : kMm;
  for (size_t i = 0; i < call.args.size() && i < names.size(); ++i)
    if (call.args[i].name.empty()) call.args[i].name = names[i];
  return call;
}

bool is_attention_kernel(std::string_view op) {
  if (starts_with(op, "_scaled_dot_product_"))
    return !starts_with(op, "_scaled_dot_product_attention_math");  // the math path is several kernels
  return starts_with(op, "_flash_attention_") || starts_with(op, "_efficient_attention_");
}

const OpArg* arg_named(const OpCall& call, std::string_view name) {
  for (const OpArg& a : call.args)
    if (a.name == name && !a.tensors.empty()) return &a;
  return nullptr;
}

double product_of(const std::vector<int64_t>& shape, size_t drop_last = 0) {
  double p = 1;
  for (size_t i = 0; i + drop_last < shape.size(); ++i) p *= static_cast<double>(shape[i]);
  return p;
}

// 2 x (the first operand's elements) x (the second's columns): 2MNK, 2BMNK.
double matmul_flops(const OpCall& call, std::string_view op) {
  const OpArg* a = arg_named(call, "mat1");
  if (!a) a = arg_named(call, "batch1");
  if (!a) a = arg_named(call, op == "addmv" || op == "addmv_" ? "mat" : "self");
  if (!a) return 0;
  const std::vector<int64_t>& left = a->tensors.front().shape;
  if (op == "mv" || op == "addmv" || op == "addmv_" || op == "dot" || op == "vdot") return 2 * product_of(left);
  const OpArg* b = arg_named(call, "mat2");
  if (!b) b = arg_named(call, "batch2");
  if (!b || b->tensors.front().shape.empty()) return 0;
  return 2 * product_of(left) * static_cast<double>(b->tensors.front().shape.back());
}

// 4 B H T S D: the scores and the weighted sum; the causal half when is_causal; backward 2.5x.
double attention_flops(const OpCall& call, std::string_view op) {
  const OpArg* q = arg_named(call, "query");
  const OpArg* k = arg_named(call, "key");
  const OpArg* v = arg_named(call, "value");
  if (!q || !k || !v) return 0;
  const auto& qs = q->tensors.front().shape;
  const auto& ks = k->tensors.front().shape;
  const auto& vs = v->tensors.front().shape;
  if (qs.size() < 2 || ks.size() < 2 || vs.empty()) return 0;
  const double rows = product_of(qs, 1), keys = static_cast<double>(ks[ks.size() - 2]);
  double flops = 2 * rows * keys * static_cast<double>(qs.back()) + 2 * rows * keys * static_cast<double>(vs.back());
  for (const OpArg& a : call.args)
    if (a.name == "is_causal" && a.flag.value_or(false)) flops /= 2;
  return op.find("backward") != std::string_view::npos ? 2.5 * flops : flops;
}

// A mutated argument that the op also reads (its old values matter).
bool reads_written(std::string_view op, const OpArg& a) { return !a.out && !kWriteOnly.count(op); }

}  // namespace

bool is_atomic_op(std::string_view name) {
  if (starts_with(name, "spmd::")) return true;
  const std::string_view op = bare(name);
  if (op == "_fused_sdp_choice") return false;
  return kMatmuls.count(op) || kAtomic.count(op) || is_attention_kernel(op) || starts_with(op, "_fused_") ||
         starts_with(op, "_foreach_") || starts_with(op, "_amp_") || starts_with(op, "nll_loss");
}

bool is_free_op(std::string_view name) {
  // The autograd engine's own ranges ("autograd::engine::evaluate_function: MmBackward0") wrap ops.
  return starts_with(name, "autograd::") || kFree.count(bare(name)) > 0 || is_host_sync(name);
}

bool is_product_op(std::string_view name) {
  const std::string_view op = bare(name);
  return kMatmuls.count(op) || is_attention_kernel(op) || !product_analog(name).empty();
}

bool is_host_sync(std::string_view name) {
  const std::string_view op = bare(name);
  return op == "item" || op == "_local_scalar_dense" || op == "is_nonzero";
}

OpCost op_cost(const OpCall& call) {
  OpCost cost;
  const std::string_view op = bare(call.name);
  cost.product = is_product_op(call.name);
  const std::string_view analog = product_analog(call.name);
  if (kMatmuls.count(op)) cost.flops = matmul_flops(call, op);
  else if (!analog.empty()) cost.flops = matmul_flops(with_analog_names(call, analog), analog);
  else if (cost.product) cost.flops = attention_flops(call, op);
  std::vector<const void*> written;  // each mutated tensor once
  for (const OpArg& a : call.args) {
    // A fused optimizer's gradients are only read (a kernel writes them back only to unscale them).
    const bool grads_read_only = starts_with(op, "_fused_adam") && a.name == "grads";
    for (const TensorInfo& t : a.tensors) {
      if (!a.written || grads_read_only || reads_written(op, a)) cost.bytes_read += t.bytes;
      if (a.written && !grads_read_only && std::find(written.begin(), written.end(), t.impl) == written.end()) {
        written.push_back(t.impl);
        cost.bytes_written += t.bytes;
      }
    }
  }
  for (const TensorInfo& t : call.outputs)
    if (std::find(written.begin(), written.end(), t.impl) == written.end()) cost.bytes_written += t.bytes;
  return cost;
}

}  // namespace spmd::census
