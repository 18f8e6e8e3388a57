#include "alltoall/token_exchange.h"

#include <atomic>
#include <chrono>

#include <torch/autograd.h>

namespace spmd {

namespace {
std::atomic<int64_t> g_expert_exchange_ns{0};

// The group's all-to-all, its wall time added to the exchange's total.
at::Tensor timed_all_to_all(const Group& group, const at::Tensor& x, const std::vector<int64_t>& sends,
                            const std::vector<int64_t>& receives) {
  const auto start = std::chrono::steady_clock::now();
  at::Tensor out = group.all_to_all_rows(x, sends, receives);
  add_expert_exchange_time_ns(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  return out;
}
}  // namespace

int64_t expert_exchange_time_ns() { return g_expert_exchange_ns.load(); }
void add_expert_exchange_time_ns(int64_t ns) { g_expert_exchange_ns += ns; }

std::vector<int64_t> ExchangePlan::sends() const {
  std::vector<int64_t> out;
  for (int64_t dst = 0; dst < members; ++dst) out.push_back(rows_from(me, dst));
  return out;
}

std::vector<int64_t> ExchangePlan::receives() const {
  std::vector<int64_t> out;
  for (int64_t src = 0; src < members; ++src) out.push_back(rows_from(src, me));
  return out;
}

namespace {
struct ExchangeRows : torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, std::vector<int64_t> sends,
                            std::vector<int64_t> receives, int64_t group) {
    ctx->saved_data["sends"] = sends;
    ctx->saved_data["receives"] = receives;
    ctx->saved_data["group"] = group;
    return timed_all_to_all(group_from_handle(group), x, sends, receives);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto sends = ctx->saved_data["sends"].toIntVector();
    const auto receives = ctx->saved_data["receives"].toIntVector();
    const Group& group = group_from_handle(ctx->saved_data["group"].toInt());
    return {timed_all_to_all(group, grads[0].contiguous(), receives, sends), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor exchange_rows(const at::Tensor& x, const ExchangePlan& plan, const Group& group) {
  if (plan.members == 1) return x;
  return ExchangeRows::apply(x, plan.sends(), plan.receives(), group_handle(group));
}

}  // namespace spmd
