// Ring attention: one autograd Function whose forward and backward each send the keys and values
// once around the context ring (the backward sends their gradients too). Head-major (B, H, T, D)
// throughout; a member's local rows [0, c) are global chunk `index`, [c, 2c) chunk 2p - 1 - index.
// Packed documents: a query sees the keys from its document's start on, so a block whose keys all
// lie before every one of its queries' document starts is skipped like a block above the diagonal.
// Each visible block is one kernels::block_attention (its backward: block_attention_backward).
#include "parallel/ring_attention.h"

#include <array>
#include <cmath>
#include <optional>

#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "kernels/kernels.h"
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

// Packed documents as this member's queries see them: their starts, and per local query chunk
// the smallest and the largest start over the batch (on the host, to skip blocks).
struct QueryDocuments {
  at::Tensor starts;                    // (B, T_local) global positions, or undefined
  std::array<int64_t, 2> least{}, most{};

  QueryDocuments(const at::Tensor& q_starts, int64_t c) : starts(q_starts) {
    if (!starts.defined()) return;
    // Starts never decrease along a chunk: its first row holds the least, its last the most.
    const at::Tensor ends = at::stack({starts.select(1, 0).min(), starts.select(1, c - 1).max(),
                                       starts.select(1, c).min(), starts.select(1, 2 * c - 1).max()})
                                .to(at::kCPU);
    const int64_t* e = ends.data_ptr<int64_t>();
    least = {e[0], e[2]};
    most = {e[1], e[3]};
  }
};

// Calls visit(local q rows, local k rows, block) for every block of this member's queries that
// the causal and document masks leave visible in member `holder`'s keys and values kv
// (2, B, H, T_local, D): a block carries its global positions, the dropout multipliers, and the
// queries' document starts where some key lies before some query's document.
template <typename Visit>
void for_visible_blocks(const at::Tensor& qh, const at::Tensor& kv, const at::Tensor& mask,
                        const QueryDocuments& documents, const ContextSplit& split, int64_t holder, Visit visit) {
  const int64_t c = qh.size(2) / 2;
  const auto q_chunks = chunks_of(split.index, split.size), k_chunks = chunks_of(holder, split.size);
  for (int64_t qa = 0; qa < 2; ++qa)
    for (int64_t kb = 0; kb < 2; ++kb) {
      if (k_chunks[kb] > q_chunks[qa]) continue;  // every key later than every query
      const int64_t k_begin = k_chunks[kb] * c;
      const bool packed = documents.starts.defined();
      if (packed && k_begin + c <= documents.least[static_cast<size_t>(qa)]) continue;  // no document shared
      kernels::AttentionBlock b;
      b.q = qh.narrow(2, qa * c, c);
      b.k = kv[0].narrow(2, kb * c, c);
      b.v = kv[1].narrow(2, kb * c, c);
      b.q_begin = q_chunks[qa] * c;
      b.k_begin = k_begin;
      if (mask.defined()) b.dropout_mask = mask.narrow(2, qa * c, c).narrow(3, k_begin, c);
      if (packed && documents.most[static_cast<size_t>(qa)] > k_begin)  // some key before some query's document
        b.q_document_starts = documents.starts.narrow(1, qa * c, c);
      visit(qa * c, kb * c, b);
    }
}

// exp(part - total) for log-sum-exps; 0 where a query has seen no key yet (both -inf).
at::Tensor lse_share(const at::Tensor& part, const at::Tensor& total) {
  return at::exp(part - total).masked_fill_(at::isinf(total), 0);
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  // The mask comes by pointer: autograd's inputs must be defined tensors, and it needs no gradient.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor* dropout_mask, const at::Tensor* q_starts, const Group* group,
                            int64_t size, int64_t index) {
    const at::Tensor& mask = *dropout_mask;
    const ContextSplit split{size, index};
    const at::Tensor qh = q.transpose(1, 2).contiguous();
    at::Tensor kv = at::stack({k.transpose(1, 2), v.transpose(1, 2)}).contiguous();  // (2, B, H, T_local, D)
    const int64_t c = qh.size(2) / 2;
    const QueryDocuments documents(*q_starts, c);
    // In packed documents a block may hide every key from some query: its log-sum-exp is -inf.
    const bool packed = documents.starts.defined();
    // Per local query chunk: the output normalised over the keys seen so far, and their log-sum-exp.
    std::array<at::Tensor, 2> out, lse;
    for (int64_t step = 0; step < size; ++step) {
      std::optional<RingShift> shift;
      if (step + 1 < size) shift.emplace(kv, *group, kKeysValuesTag);  // overlaps the blocks below
      const int64_t holder = (index - step + size) % size;
      for_visible_blocks(qh, kv, mask, documents, split, holder, [&](int64_t q0, int64_t, const auto& b) {
        const auto [block_out, block_lse] = kernels::block_attention(b);
        at::Tensor& o = out[static_cast<size_t>(q0 / c)];
        at::Tensor& l = lse[static_cast<size_t>(q0 / c)];
        if (!o.defined()) {
          o = block_out, l = block_lse;
          return;
        }
        const at::Tensor merged = at::logaddexp(l, block_lse);
        if (packed) o = o * lse_share(l, merged) + block_out * lse_share(block_lse, merged);
        else o = o * at::exp(l - merged) + block_out * at::exp(block_lse - merged);
        l = merged;
      });
      if (shift) kv = shift->wait();
    }
    const at::Tensor oh = at::cat({out[0], out[1]}, 2), lse_all = at::cat({lse[0], lse[1]}, 2);
    ctx->save_for_backward({q, k, v, oh, lse_all});
    if (mask.defined()) ctx->saved_data["mask"] = mask;
    if (packed) ctx->saved_data["q_starts"] = documents.starts;
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
    const at::Tensor q_starts =
        ctx->saved_data.count("q_starts") ? ctx->saved_data["q_starts"].toTensor() : at::Tensor();
    const Group& group = group_from_handle(ctx->saved_data["group"].toInt());
    const ContextSplit split{ctx->saved_data["size"].toInt(), ctx->saved_data["index"].toInt()};
    const int64_t size = split.size;
    const at::Tensor qh = q.transpose(1, 2).contiguous(), doh = grads[0].transpose(1, 2).contiguous();
    const at::Tensor row_dot = (doh * oh).sum(-1, true);  // (B, H, T_local, 1)
    at::Tensor kv = at::stack({k.transpose(1, 2), v.transpose(1, 2)}).contiguous();
    at::Tensor dkv = at::zeros_like(kv);
    at::Tensor dq = at::zeros_like(qh);
    const int64_t c = qh.size(2) / 2;
    const QueryDocuments documents(q_starts, c);
    for (int64_t step = 0; step < size; ++step) {
      std::optional<RingShift> shift;
      if (step + 1 < size) shift.emplace(kv, group, kKeysValuesTag);
      const int64_t holder = (split.index - step + size) % size;
      for_visible_blocks(qh, kv, mask, documents, split, holder, [&](int64_t q0, int64_t k0, const auto& b) {
        kernels::block_attention_backward(b, {doh.narrow(2, q0, c), lse.narrow(2, q0, c), row_dot.narrow(2, q0, c),
                                              dq.narrow(2, q0, c), dkv[0].narrow(2, k0, c), dkv[1].narrow(2, k0, c)});
      });
      // The gradients of the keys and values held this step go where those keys go next.
      dkv = RingShift(dkv, group, kGradientsTag).wait();
      if (shift) kv = shift->wait();
    }
    // After the last step's shift each member holds the gradient of its own keys and values.
    return {dq.transpose(1, 2), dkv[0].transpose(1, 2), dkv[1].transpose(1, 2), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};
}  // namespace

at::Tensor ring_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dropout_mask,
                          const Group& group, const ContextSplit& split, const at::Tensor& q_document_starts) {
  SPMD_ASSERT(group.size() == split.size && split.size > 1 && q.size(1) % 2 == 0,
              "ring attention: group of {} for a split of {}, {} local positions", group.size(), split.size, q.size(1));
  SPMD_ASSERT((!q_document_starts.defined() || q_document_starts.sizes() == at::IntArrayRef({q.size(0), q.size(1)})),
              "ring attention: document starts {} for q {}", q_document_starts.sizes().vec(), q.sizes().vec());
  return RingAttention::apply(q, k, v, &dropout_mask, &q_document_starts, &group, split.size, split.index);
}

}  // namespace spmd
