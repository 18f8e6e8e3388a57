// The chunked LM head and cross-entropy (parallel/head_loss.h) on one process against the plain
// computation, autograd through the full logits: the loss and the gradients of x and the table in
// float32 to 1e-6, with padding columns (never scored, their rows' gradient zero), ignored
// (negative) targets, and chunks of 1, 3, the default and more rows than there are; the per-row
// losses; a loss gradient other than 1; bf16 operands against the products of rounded operands,
// on a float32 or a bf16 input.
// Several members of a vocab-parallel group and FSDP shards: tests/workers/collectives_worker.cpp.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>  // completes c10d::Backend: a Group of one is built here

#include "comm/group.h"
#include "parallel/head_loss.h"

#include "doctest_check.h"

using namespace spmd;

namespace {

constexpr int64_t kRows = 37, kWidth = 24, kValid = 50, kPadded = 64;

struct Problem {
  at::Tensor x, table, targets;
};

// Padding rows of the table are random (not zero), so a leak into the softmax would show.
Problem problem(uint64_t seed) {
  at::manual_seed(seed);
  Problem p;
  p.x = at::randn({kRows, kWidth}).requires_grad_(true);
  p.table = at::randn({kPadded, kWidth}).requires_grad_(true);
  p.targets = at::randint(0, kValid, {kRows}, at::kLong);
  p.targets.index_put_({at::arange(0, kRows, 5)}, -1);  // every fifth row is not scored
  return p;
}

// The plain computation: full logits of the valid columns, libtorch's cross-entropy summed over
// the scored rows, divided by all rows.
at::Tensor reference_loss(const Problem& p, at::ScalarType operands = at::kFloat) {
  const at::Tensor logits = at::mm(p.x.to(operands), p.table.to(operands).t()).to(at::kFloat).narrow(1, 0, kValid);
  return at::cross_entropy_loss(logits, p.targets, {}, at::Reduction::Sum, /*ignore_index=*/-1) / kRows;
}

HeadShard one_member(const Group& group, int64_t chunk_rows, at::ScalarType operands = at::kFloat) {
  HeadShard head;
  head.valid_vocab = kValid;
  head.vocab_group = &group;
  head.chunk_rows = chunk_rows;
  head.operand_dtype = operands;
  return head;
}

double max_relative(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
}

}  // namespace

TEST_CASE("head cross-entropy in chunks equals the full-logits cross-entropy: loss, grad x, grad table (fp32, 1e-6)") {
  const Group self;
  const Problem p = problem(11);
  const at::Tensor want = reference_loss(p);
  const auto want_grads = torch::autograd::grad({want}, {p.x, p.table});
  for (int64_t rows : {int64_t{1}, int64_t{3}, int64_t{0}, kRows + 5}) {
    CAPTURE(rows);
    const at::Tensor loss = head_cross_entropy(p.x, p.table, p.targets, one_member(self, rows));
    CHECK(loss.dim() == 0);
    CHECK(std::abs(loss.item<double>() - want.item<double>()) <= 1e-6 * std::abs(want.item<double>()));
    const auto grads = torch::autograd::grad({loss}, {p.x, p.table});
    CHECK(max_relative(grads[0], want_grads[0]) <= 1e-6);
    CHECK(max_relative(grads[1], want_grads[1]) <= 1e-6);
    CHECK(grads[1].narrow(0, kValid, kPadded - kValid).abs().max().item<double>() == 0.0);  // padding: no gradient
    CHECK(grads[0].index({p.targets < 0}).abs().max().item<double>() == 0.0);               // ignored rows: none
  }
}

TEST_CASE("head cross-entropy: the loss's gradient scales both gradients, no-grad mode gives the same loss") {
  const Group self;
  const Problem p = problem(12);
  const at::Tensor want = reference_loss(p);
  const at::Tensor scale = at::full({}, 0.25);
  const auto want_grads = torch::autograd::grad({want}, {p.x, p.table}, {scale});
  const at::Tensor loss = head_cross_entropy(p.x, p.table, p.targets, one_member(self, 4));
  const auto grads = torch::autograd::grad({loss}, {p.x, p.table}, {scale});
  CHECK(max_relative(grads[0], want_grads[0]) <= 1e-6);
  CHECK(max_relative(grads[1], want_grads[1]) <= 1e-6);
  at::NoGradGuard no_grad;
  const at::Tensor plain = head_cross_entropy(p.x, p.table, p.targets, one_member(self, 4));
  CHECK_FALSE(plain.requires_grad());
  CHECK(std::abs(plain.item<double>() - want.item<double>()) <= 1e-6 * std::abs(want.item<double>()));
}

TEST_CASE("head token losses: each row's cross-entropy, 0 where the target is negative") {
  const Group self;
  const Problem p = problem(13);
  const at::Tensor logits = at::mm(p.x, p.table.t()).narrow(1, 0, kValid);
  const at::Tensor want =
      at::cross_entropy_loss(logits, p.targets, {}, at::Reduction::None, /*ignore_index=*/-1).detach();
  for (int64_t rows : {int64_t{2}, int64_t{0}}) {
    CAPTURE(rows);
    const at::Tensor got = head_token_losses(p.x, p.table, p.targets, one_member(self, rows));
    CHECK_FALSE(got.requires_grad());
    CHECK(got.sizes() == want.sizes());
    CHECK(max_relative(got, want) <= 1e-6);
    CHECK(got.index({p.targets < 0}).abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("head cross-entropy with bf16 operands: against the products of the rounded operands") {
  const Group self;
  const Problem p = problem(14);
  const at::Tensor want = reference_loss(p, at::kBFloat16);
  const auto want_grads = torch::autograd::grad({want}, {p.x, p.table});
  const at::Tensor loss = head_cross_entropy(p.x, p.table, p.targets, one_member(self, 5, at::kBFloat16));
  CHECK((loss.scalar_type() == at::kFloat));
  CHECK(std::abs(loss.item<double>() - want.item<double>()) <= 1e-3 * std::abs(want.item<double>()));
  const auto grads = torch::autograd::grad({loss}, {p.x, p.table});
  CHECK((grads[1].scalar_type() == at::kFloat));
  CHECK(max_relative(grads[0], want_grads[0]) <= 2e-2);
  CHECK(max_relative(grads[1], want_grads[1]) <= 2e-2);
}

TEST_CASE("head cross-entropy on bf16 activations: float32 loss and table gradient, x's gradient in bf16") {
  // bf16 matmuls hand the head a bf16 input (the final norm's output): the products run on it, the
  // log-softmax and the loss in float32; the same numbers as a float32 x rounded to bf16.
  const Group self;
  const Problem p = problem(15);
  const at::Tensor x16 = p.x.detach().to(at::kBFloat16).requires_grad_(true);
  const at::Tensor want = reference_loss(p, at::kBFloat16);
  const auto want_grads = torch::autograd::grad({want}, {p.x, p.table});
  for (int64_t rows : {int64_t{5}, int64_t{0}}) {
    CAPTURE(rows);
    const at::Tensor loss = head_cross_entropy(x16, p.table, p.targets, one_member(self, rows, at::kBFloat16));
    CHECK((loss.scalar_type() == at::kFloat));
    CHECK(std::abs(loss.item<double>() - want.item<double>()) <= 1e-3 * std::abs(want.item<double>()));
    const auto grads = torch::autograd::grad({loss}, {x16, p.table});
    CHECK((grads[0].scalar_type() == at::kBFloat16));
    CHECK((grads[1].scalar_type() == at::kFloat));
    CHECK(max_relative(grads[0].to(at::kFloat), want_grads[0]) <= 2e-2);
    CHECK(max_relative(grads[1], want_grads[1]) <= 2e-2);
    const at::Tensor tokens = head_token_losses(x16, p.table, p.targets, one_member(self, rows, at::kBFloat16));
    CHECK((tokens.scalar_type() == at::kFloat));
    CHECK(std::abs(tokens.sum().item<double>() / kRows - want.item<double>()) <= 1e-3 * std::abs(want.item<double>()));
  }
}

TEST_CASE("head chunk rows: 32 MiB of logits on a CPU, 1 GiB and at most half the rows on a GPU, a multiple of 8, at least 8") {
  CHECK(head_chunk_rows(50304, 32768, false) == 160);  // 32 MiB / (50304 x 4 B) = 166.8
  CHECK(head_chunk_rows(65, 32768, false) % 8 == 0);
  CHECK(head_chunk_rows(int64_t{1} << 24, 32768, false) == 8);
  CHECK(head_chunk_rows(50304, 32768, true) == 5336);  // 1 GiB / (50304 x 4 B) = 5336.3
  CHECK(head_chunk_rows(50304, 2048, true) == 1024);   // half the rows: never the whole logits
  CHECK(head_chunk_rows(50304, 4, true) == 8);
}
