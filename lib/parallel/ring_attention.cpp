// Ring attention: one autograd Function whose forward and backward each send the keys and values
// once around the context ring (the backward sends their gradients too). Head-major (B, H, T, D)
// throughout; a member's local rows [0, c) are global chunk `index`, [c, 2c) chunk 2p - 1 - index.
#include "parallel/ring_attention.h"

#include <array>
#include <cmath>
#include <optional>

#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

namespace spmd {

namespace {
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Tags of the ring's transfers (a group's point-to-point pairs match by tag).
constexpr int kKeysValuesTag = 0x7269, kGradientsTag = 0x7268;

// x to the next member, the previous member's x back: started here, finished by wait().
class RingShift {
 public:
  RingShift(const at::Tensor& x, const Group& group, int tag) {
    const int next = (group.rank() + 1) % group.size(), previous = (group.rank() + group.size() - 1) % group.size();
    received_ = at::empty_like(x);
    receive_ = group.receive_async(received_, previous, tag);
    send_ = group.send_async(x.contiguous(), next, tag);
  }
  at::Tensor wait() {
    receive_.wait();
    send_.wait();
    return received_;
  }

 private:
  at::Tensor received_;
  PendingCollective receive_, send_;
};

// The global chunks a member's local rows hold.
std::array<int64_t, 2> chunks_of(int64_t member, int64_t size) { return {member, 2 * size - 1 - member}; }

// One visible block: queries of global chunk `q_chunk` against keys of `k_chunk` (<= q_chunk;
// equal: the causal diagonal).
struct BlockView {
  at::Tensor q, k, v, mask;  // mask: (B, H, c, c) dropout multipliers or undefined
  bool diagonal = false;
};

// Scores of a block with the causal mask on the diagonal: (B, H, c, c).
at::Tensor block_scores(const BlockView& b, double scale) {
  at::Tensor s = at::matmul(b.q, b.k.transpose(-2, -1)).mul_(scale);
  if (b.diagonal) {
    const int64_t c = s.size(-1);
    s.masked_fill_(at::ones({c, c}, s.options().dtype(at::kBool)).triu(1), -INFINITY);
  }
  return s;
}

// Calls visit(local q rows, local k rows, view) for every block of this member's queries that
// the causal mask leaves visible in member `holder`'s keys and values kv (2, B, H, T_local, D).
template <typename Visit>
void for_visible_blocks(const at::Tensor& qh, const at::Tensor& kv, const at::Tensor& mask, const ContextSplit& split,
                        int64_t holder, Visit visit) {
  const int64_t c = qh.size(2) / 2;
  const auto q_chunks = chunks_of(split.index, split.size), k_chunks = chunks_of(holder, split.size);
  for (int64_t qa = 0; qa < 2; ++qa)
    for (int64_t kb = 0; kb < 2; ++kb) {
      if (k_chunks[kb] > q_chunks[qa]) continue;  // every key later than every query
      BlockView b;
      b.q = qh.narrow(2, qa * c, c);
      b.k = kv[0].narrow(2, kb * c, c);
      b.v = kv[1].narrow(2, kb * c, c);
      if (mask.defined()) b.mask = mask.narrow(2, qa * c, c).narrow(3, k_chunks[kb] * c, c);
      b.diagonal = k_chunks[kb] == q_chunks[qa];
      visit(qa * c, kb * c, b);
    }
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  // The mask comes by pointer: autograd's inputs must be defined tensors, and it needs no gradient.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor* dropout_mask, const Group* group, int64_t size, int64_t index) {
    const at::Tensor& mask = *dropout_mask;
    const ContextSplit split{size, index};
    const at::Tensor qh = q.transpose(1, 2).contiguous();
    at::Tensor kv = at::stack({k.transpose(1, 2), v.transpose(1, 2)}).contiguous();  // (2, B, H, T_local, D)
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const int64_t c = qh.size(2) / 2;
    // Per local query chunk: the output normalised over the keys seen so far, and their log-sum-exp.
    std::array<at::Tensor, 2> out, lse;
    for (int64_t step = 0; step < size; ++step) {
      std::optional<RingShift> shift;
      if (step + 1 < size) shift.emplace(kv, *group, kKeysValuesTag);  // overlaps the blocks below
      for_visible_blocks(qh, kv, mask, split, (index - step + size) % size, [&](int64_t q0, int64_t, const BlockView& b) {
        at::Tensor s = block_scores(b, scale);
        const at::Tensor block_lse = at::logsumexp(s, -1, true);
        at::Tensor p = s.sub_(block_lse).exp_();
        if (b.mask.defined()) p.mul_(b.mask);
        const at::Tensor block_out = at::matmul(p, b.v);
        at::Tensor& o = out[static_cast<size_t>(q0 / c)];
        at::Tensor& l = lse[static_cast<size_t>(q0 / c)];
        if (!o.defined()) {
          o = block_out, l = block_lse;
          return;
        }
        const at::Tensor merged = at::logaddexp(l, block_lse);
        o = o * at::exp(l - merged) + block_out * at::exp(block_lse - merged);
        l = merged;
      });
      if (shift) kv = shift->wait();
    }
    const at::Tensor oh = at::cat({out[0], out[1]}, 2), lse_all = at::cat({lse[0], lse[1]}, 2);
    ctx->save_for_backward({q, k, v, oh, lse_all});
    if (mask.defined()) ctx->saved_data["mask"] = mask;
    ctx->saved_data["group"] = group_handle(*group);
    ctx->saved_data["size"] = size;
    ctx->saved_data["index"] = index;
    return oh.transpose(1, 2);
  }

  // Flash attention's backward per block, with the final output and log-sum-exp: P = exp(S - lse),
  // dV += P'^T dO, dS = P (dP' m - rowsum(dO O)) where P' = P m is the dropped probability. The
  // keys' and values' gradients travel with them and arrive at their owner after the last step.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &oh = saved[3], &lse = saved[4];
    const at::Tensor mask = ctx->saved_data.count("mask") ? ctx->saved_data["mask"].toTensor() : at::Tensor();
    const Group& group = group_from_handle(ctx->saved_data["group"].toInt());
    const ContextSplit split{ctx->saved_data["size"].toInt(), ctx->saved_data["index"].toInt()};
    const int64_t size = split.size;
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
    const at::Tensor qh = q.transpose(1, 2).contiguous(), doh = grads[0].transpose(1, 2).contiguous();
    const at::Tensor row_dot = (doh * oh).sum(-1, true);  // (B, H, T_local, 1)
    at::Tensor kv = at::stack({k.transpose(1, 2), v.transpose(1, 2)}).contiguous();
    at::Tensor dkv = at::zeros_like(kv);
    at::Tensor dq = at::zeros_like(qh);
    const int64_t c = qh.size(2) / 2;
    for (int64_t step = 0; step < size; ++step) {
      std::optional<RingShift> shift;
      if (step + 1 < size) shift.emplace(kv, group, kKeysValuesTag);
      for_visible_blocks(qh, kv, mask, split, (split.index - step + size) % size, [&](int64_t q0, int64_t k0, const BlockView& b) {
        const at::Tensor p = block_scores(b, scale).sub_(lse.narrow(2, q0, c)).exp_();
        const at::Tensor d_out = doh.narrow(2, q0, c);
        const at::Tensor dropped = b.mask.defined() ? p * b.mask : p;
        dkv[1].narrow(2, k0, c).add_(at::matmul(dropped.transpose(-2, -1), d_out));
        at::Tensor dp = at::matmul(d_out, b.v.transpose(-2, -1));
        if (b.mask.defined()) dp.mul_(b.mask);
        const at::Tensor ds = p * (dp - row_dot.narrow(2, q0, c));
        dq.narrow(2, q0, c).add_(at::matmul(ds, b.k), scale);
        dkv[0].narrow(2, k0, c).add_(at::matmul(ds.transpose(-2, -1), b.q), scale);
      });
      // The gradients of the keys and values held this step go where those keys go next.
      dkv = RingShift(dkv, group, kGradientsTag).wait();
      if (shift) kv = shift->wait();
    }
    // After the last step's shift each member holds the gradient of its own keys and values.
    return {dq.transpose(1, 2), dkv[0].transpose(1, 2), dkv[1].transpose(1, 2), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dropout_mask,
                          const Group& group, const ContextSplit& split) {
  SPMD_ASSERT(group.size() == split.size && split.size > 1 && q.size(1) % 2 == 0,
              "ring attention: group of {} for a split of {}, {} local positions", group.size(), split.size, q.size(1));
  return RingAttention::apply(q, k, v, &dropout_mask, &group, split.size, split.index);
}

}  // namespace spmd
