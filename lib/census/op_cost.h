// What one recorded op costs on a GPU: whether it is a launch of its own, its FLOPs (the dense
// products and attention) and the bytes it reads and writes, from its arguments' shapes alone.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <c10/core/ScalarType.h>

namespace spmd::census {

// One tensor an op touched: what it covers, and which storage (to tell views and in-place ops).
struct TensorInfo {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t bytes = 0;               // numel * element size: the bytes its view covers
  const void* storage = nullptr;   // the StorageImpl, an identity only
  const void* impl = nullptr;      // the TensorImpl: an in-place op returns the tensor it mutated
};

// One argument, in the op's schema order (unnamed for ops without a schema, e.g. spmd::*).
struct OpArg {
  std::string name;
  bool written = false;            // the schema marks it mutated (self of an in-place op, out=)
  bool out = false;                // an out= argument: written, never read
  std::vector<TensorInfo> tensors;  // a tensor, a list of tensors, or none
  std::optional<bool> flag;        // a bool argument's value (is_causal)
};

struct OpCall {
  std::string name;       // "aten::mm", "spmd::fused_linear"
  std::string overload;   // "out" for an out= variant
  std::vector<OpArg> args;
  std::vector<TensorInfo> outputs;
};

// The ops a GPU runs as one kernel however the CPU computes them: products, SDPA's kernels,
// fused and foreach ops, norms, softmaxes, losses, spmd::* (our kernels and their stand-ins).
// Their children are not counted.
bool is_atomic_op(std::string_view name);
// Views, metadata and allocation: no kernel (a copy they need shows as a child op).
bool is_free_op(std::string_view name);
// The dense products and attention: the work counted "in products" (spmd::mm*, spmd::addmm*, ...:
// the aten product they stand for, their tensors in its order).
bool is_product_op(std::string_view name);
// Reads a number back to the host: a device sync.
bool is_host_sync(std::string_view name);

struct OpCost {
  double flops = 0;          // products only: 2 per multiply-add
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  bool product = false;
};

// FLOPs and bytes of one launch. Every tensor argument is read and every output written; a
// mutated argument is written (counted once however many outputs alias it) and read too, except
// by the ops that only write it (copy_, fill_, zero_, the random fills) and out= arguments.
// Attention: 4 B H T S D forward, halved when is_causal (the visible half), backward 2.5x.
OpCost op_cost(const OpCall& call);

}  // namespace spmd::census
