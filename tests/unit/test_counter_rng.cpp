// The counter-based generator: a block drawn alone equals the same block of the full array, and
// the draws look like N(0, std^2) / Bernoulli(1 - p).
#include "parallel/counter_rng.h"
#include "kernels/counter_hash.h"

#include <cmath>

#include "doctest_check.h"

using namespace spmd;

TEST_CASE("rng: every block of a parameter equals the same slice of the full draw") {
  const std::vector<int64_t> global{6, 8, 4};
  at::Tensor full = at::empty(global, at::kFloat);
  fill_normal_block(full, global, {0, 0, 0}, 1337, stream_id("h.0.w"), 0.02);
  for (std::vector<int64_t> offset : {std::vector<int64_t>{0, 0, 0}, {3, 4, 0}, {0, 2, 2}}) {
    std::vector<int64_t> shape{3, 4, 2};
    at::Tensor block = at::empty(shape, at::kFloat);
    fill_normal_block(block, global, offset, 1337, stream_id("h.0.w"), 0.02);
    at::Tensor expected = full.narrow(0, offset[0], 3).narrow(1, offset[1], 4).narrow(2, offset[2], 2);
    CHECK(at::equal(block, expected));
  }
  at::Tensor other = at::empty(global, at::kFloat);
  fill_normal_block(other, global, {0, 0, 0}, 1337, stream_id("h.1.w"), 0.02);
  CHECK_FALSE(at::equal(full, other));  // another name, another stream
}

TEST_CASE("rng: moments of the normal and dropout draws") {
  const std::vector<int64_t> global{400, 500};
  at::Tensor x = at::empty(global, at::kFloat);
  fill_normal_block(x, global, {0, 0}, 7, stream_id("w"), 0.02);
  CHECK(x.mean().item<double>() == doctest::Approx(0.0).epsilon(0).scale(1).epsilon(1e-3));
  CHECK(x.std().item<double>() == doctest::Approx(0.02).epsilon(0.01));
  at::Tensor mask = dropout_mask_block(global, global, {0, 0}, 7, stream_id("drop@step3"), 0.1);
  CHECK(mask.mean().item<double>() == doctest::Approx(1.0).epsilon(0.01));  // kept / (1 - p) on average
  CHECK((mask == 0).to(at::kFloat).mean().item<double>() == doctest::Approx(0.1).epsilon(0.05));
}

TEST_CASE("rng: every block of a dropout mask equals the same slice of the full mask") {
  const std::vector<int64_t> global{4, 6, 70};
  at::Tensor full = dropout_mask_block(global, global, {0, 0, 0}, 11, stream_id("attn@step2"), 0.3);
  for (std::vector<int64_t> offset : {std::vector<int64_t>{0, 0, 0}, {2, 3, 0}, {1, 0, 35}}) {
    std::vector<int64_t> shape{2, 3, 35};
    at::Tensor block = dropout_mask_block(shape, global, offset, 11, stream_id("attn@step2"), 0.3);
    CHECK(at::equal(block, full.narrow(0, offset[0], 2).narrow(1, offset[1], 3).narrow(2, offset[2], 35)));
  }
}

TEST_CASE("rng: the dropout mask is a fixed function of (seed, stream, index)") {
  // The dropped positions as the generator first produced them (element by element, one thread),
  // so a faster implementation cannot change which units a run drops.
  const std::vector<int64_t> dropped{3,   5,   7,   9,   10,  18,  19,  20,  22,  25,  26,  32,  34,  39,  46,  52,
                                     54,  59,  66,  68,  69,  70,  77,  81,  87,  92,  99,  100, 108, 110, 122, 128,
                                     129, 130, 131, 134, 137, 139, 142, 143, 144, 146, 147, 149, 158, 160, 168, 169,
                                     170, 171, 179, 180, 181, 182, 183, 186, 188, 189, 192, 193, 194, 195, 196};
  at::Tensor mask = dropout_mask_block({5, 40}, {5, 40}, {0, 0}, 7, stream_id("x@step1"), 0.3);
  at::Tensor zeros = (mask == 0).flatten().nonzero().flatten();
  REQUIRE(zeros.numel() == static_cast<int64_t>(dropped.size()));
  for (size_t i = 0; i < dropped.size(); ++i) CHECK(zeros[static_cast<int64_t>(i)].item<int64_t>() == dropped[i]);
  CHECK(at::allclose(mask.masked_select(mask != 0), at::full({1}, 1.0f / 0.7f)));
}

namespace {
// An independent computation of the mask, for the test below: splitmix64's uint64 arithmetic on
// int64 tensors (same bits: two's-complement products and sums wrap mod 2^64; ATen's >> on int64
// is arithmetic, hence the mask for a logical shift), the global indices from aranges, and the
// threshold compared in integers. The GPU once drew its mask this way.
int64_t bits_of(uint64_t x) { return static_cast<int64_t>(x); }

at::Tensor logical_shift_right(const at::Tensor& x, int k) {
  return at::bitwise_and(at::bitwise_right_shift(x, k), bits_of(~0ull >> k));
}

at::Tensor splitmix64_of(at::Tensor x) {
  x = x + bits_of(0x9E3779B97F4A7C15ull);
  x = at::bitwise_xor(x, logical_shift_right(x, 30)) * bits_of(0xBF58476D1CE4E5B9ull);
  x = at::bitwise_xor(x, logical_shift_right(x, 27)) * bits_of(0x94D049BB133111EBull);
  return at::bitwise_xor(x, logical_shift_right(x, 31));
}

at::Tensor mask_with_aten_ops(const std::vector<int64_t>& local_shape, const std::vector<int64_t>& global_shape,
                              const std::vector<int64_t>& offset, uint64_t seed, uint64_t stream, double p) {
  at::Tensor index = at::zeros(local_shape, at::kLong);
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(local_shape.size()) - 1; d >= 0; --d) {
    const auto i = static_cast<size_t>(d);
    std::vector<int64_t> along(local_shape.size(), 1);
    along[i] = local_shape[i];
    index.add_((at::arange(local_shape[i], at::kLong) + offset[i]).view(along) * stride);
    stride *= global_shape[i];
  }
  // The stream key as the generator defines it: splitmix64(seed ^ splitmix64(stream)).
  const int64_t stream_hash = splitmix64_of(at::full({1}, bits_of(stream), at::kLong)).item<int64_t>();
  const int64_t key = splitmix64_of(at::full({1}, bits_of(seed) ^ stream_hash, at::kLong)).item<int64_t>();
  const at::Tensor bits = splitmix64_of(at::bitwise_xor(index, key));
  // ((bits >> 11) + 1) > p 2^53 in integers: k > x <=> k > floor(x) for integer k.
  const auto threshold = static_cast<int64_t>(std::floor(p * 9007199254740992.0));
  const at::Tensor keep = (logical_shift_right(bits, 11) + 1) > threshold;
  return at::where(keep, at::scalar_tensor(static_cast<float>(1.0 / (1.0 - p))), at::scalar_tensor(0.0f));
}
}  // namespace

TEST_CASE("rng: the mask made with ATen integer ops has the bits of the loop the CPU and the GPU kernel share") {
  // dropout_mask_block's per-element math (kernels/counter_hash.h) is also the GPU kernel's, so
  // checking it against a computation that shares no code with it checks both: blocks at offsets,
  // odd shapes, several p (0.5's threshold is a power of two).
  const std::vector<int64_t> global{4, 6, 70};
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    for (std::vector<int64_t> offset : {std::vector<int64_t>{0, 0, 0}, {2, 3, 0}, {1, 0, 35}}) {
      CAPTURE(p);
      CAPTURE(offset);
      const std::vector<int64_t> shape{2, 3, 35};
      const at::Tensor loop = dropout_mask_block(shape, global, offset, 11, stream_id("attn@step2"), p);
      const at::Tensor aten = mask_with_aten_ops(shape, global, offset, 11, stream_id("attn@step2"), p);
      CHECK(at::equal(aten, loop));
      CHECK(at::equal(dropout_mask_block_on(at::kCPU, shape, global, offset, 11, stream_id("attn@step2"), p), loop));
    }
  }
  // Large global indices (a GPT-2 124M attention mask has ~2^31 elements per layer and batch),
  // a 4-D block at an offset in every dimension.
  const std::vector<int64_t> huge{64, 12, 1024, 1024};
  const std::vector<int64_t> corner{1, 2, 3, 1024}, at_end{63, 10, 1021, 0}, inner{2, 3, 5, 7}, inside{9, 4, 700, 1000};
  CHECK(at::equal(mask_with_aten_ops(corner, huge, at_end, 5, 99, 0.1), dropout_mask_block(corner, huge, at_end, 5, 99, 0.1)));
  CHECK(at::equal(mask_with_aten_ops(inner, huge, inside, 5, 99, 0.1), dropout_mask_block(inner, huge, inside, 5, 99, 0.1)));
  // A 0-dim block.
  CHECK(at::equal(mask_with_aten_ops({}, {}, {}, 3, 4, 0.5), dropout_mask_block({}, {}, {}, 3, 4, 0.5)));
}

TEST_CASE("rng: a block with its whole dimensions merged gives every element the same global index") {
  // What the GPU kernel receives (kernels/counter_hash.h's merge_whole_dimensions): fewer
  // dimensions, the same index for every element, whatever merges (the attention mask of a
  // data-parallel rank, of a tensor-parallel one, a block sharded along its last dimension).
  using counter_hash::BlockIndex;
  auto block_of = [](std::vector<int64_t> shape, std::vector<int64_t> global, std::vector<int64_t> offset) {
    BlockIndex b{};
    b.rank = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int d = b.rank - 1; d >= 0; --d) {
      b.shape[d] = shape[d], b.offset[d] = offset[d], b.global_stride[d] = stride;
      stride *= global[d];
    }
    return b;
  };
  struct Case {
    std::vector<int64_t> shape, global, offset;
    int merged_rank;
  };
  const std::vector<Case> cases{
      {{2, 3, 5, 5}, {6, 3, 5, 5}, {4, 0, 0, 0}, 1},  // data-parallel: one run
      {{2, 1, 5, 5}, {2, 3, 5, 5}, {0, 2, 0, 0}, 2},  // one head of three
      {{2, 3, 5, 2}, {2, 3, 5, 4}, {0, 0, 0, 2}, 2},  // sharded along the last dimension
      {{1, 3, 4}, {3, 3, 4}, {2, 0, 0}, 1},
      {{3, 7}, {3, 7}, {0, 0}, 1},
      {{5}, {9}, {4}, 1},
      {{2, 1, 3}, {4, 1, 3}, {1, 0, 0}, 1},
  };
  for (const Case& c : cases) {
    CAPTURE(c.shape);
    CAPTURE(c.offset);
    const BlockIndex block = block_of(c.shape, c.global, c.offset);
    const BlockIndex merged = counter_hash::merge_whole_dimensions(block);
    CHECK(merged.rank == c.merged_rank);
    int64_t numel = 1;
    for (int64_t s : c.shape) numel *= s;
    for (uint64_t i = 0; i < static_cast<uint64_t>(numel); ++i)
      CHECK(counter_hash::global_index(merged, i) == counter_hash::global_index(block, i));
  }
}
