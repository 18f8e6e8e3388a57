// The counter-based generator: a block drawn alone equals the same block of the full array, and
// the draws look like N(0, std^2) / Bernoulli(1 - p).
#include "parallel/counter_rng.h"

// libtorch pulls in glog, whose CHECK would silently replace doctest's.
#undef CHECK
#include <doctest/doctest.h>

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

TEST_CASE("rng: the mask made with ATen integer ops (the GPU's) has the CPU loop's bits") {
  // dropout_mask_block_on is what a GPU runs; on the CPU both implementations exist, so every
  // bit must agree: blocks at offsets, odd shapes, several p (0.5's threshold is a power of two).
  const std::vector<int64_t> global{4, 6, 70};
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    for (std::vector<int64_t> offset : {std::vector<int64_t>{0, 0, 0}, {2, 3, 0}, {1, 0, 35}}) {
      CAPTURE(p);
      CAPTURE(offset);
      const std::vector<int64_t> shape{2, 3, 35};
      const at::Tensor loop = dropout_mask_block(shape, global, offset, 11, stream_id("attn@step2"), p);
      const at::Tensor aten = dropout_mask_block_on(at::kCPU, shape, global, offset, 11, stream_id("attn@step2"), p);
      CHECK((aten.scalar_type() == at::kFloat));
      CHECK(aten.sizes() == loop.sizes());
      CHECK(at::equal(aten, loop));
    }
  }
  // Large global indices (a GPT-2 124M attention mask has ~2^31 elements per layer and batch).
  const std::vector<int64_t> huge{64, 12, 1024, 1024};
  const std::vector<int64_t> corner{1, 2, 3, 1024}, at_end{63, 10, 1021, 0};
  CHECK(at::equal(dropout_mask_block_on(at::kCPU, corner, huge, at_end, 5, 99, 0.1),
                  dropout_mask_block(corner, huge, at_end, 5, 99, 0.1)));
  // A block large enough to be drawn a few rows at a time (2^24 elements at once).
  const std::vector<int64_t> big{8, 3, 1024, 1024}, big_block{6, 3, 1024, 1024}, big_offset{2, 0, 0, 0};
  CHECK(at::equal(dropout_mask_block_on(at::kCPU, big_block, big, big_offset, 8, 1, 0.2),
                  dropout_mask_block(big_block, big, big_offset, 8, 1, 0.2)));
  // A 0-dim block.
  CHECK(at::equal(dropout_mask_block_on(at::kCPU, {}, {}, {}, 3, 4, 0.5), dropout_mask_block({}, {}, {}, 3, 4, 0.5)));
}
