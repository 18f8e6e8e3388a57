// lib/census on hand-made op sequences: which ops count as launches, their FLOPs and bytes, host
// syncs, regions through backward, what backward holds, the roofline and the census line.
#include <string>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/autograd.h>

#include "census/census_report.h"
#include "census/census_summary.h"
#include "census/op_census.h"
#include "census/roofline.h"
#include "util/error.h"

#include "doctest_check.h"

using namespace spmd::census;

namespace {

int64_t launches_named(const CensusLog& log, const std::string& name) {
  int64_t n = 0;
  for (const Launch& l : log.launches) n += l.name == name;
  return n;
}

const Launch& launch_named(const CensusLog& log, const std::string& name) {
  for (const Launch& l : log.launches)
    if (l.name == name) return l;
  FAIL("no launch " << name);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("census: an mm, an add, a view, in-place ops and a composite product count as their launches") {
  const at::Tensor a = at::randn({8, 16}), b = at::randn({16, 4});
  CensusLog log;
  {
    OpCensus census;
    at::Tensor c = at::mm(a, b);               // 2*8*16*4 FLOPs; reads (128 + 64) floats, writes 32
    at::Tensor d = c + c;                      // reads 2 x 32 floats, writes 32
    at::Tensor e = d.view({32});               // no launch
    d.add_(c);                                 // reads d and c, writes d
    e.copy_(c.view({32}));                     // writes e only
    at::Tensor f = at::matmul(a, b);           // composite: the mm inside is the launch
    at::Tensor g = a.t().contiguous();         // the copy inside is the launch
    log = census.finish();
  }
  CHECK(log.launches.size() == 6);
  CHECK(launches_named(log, "aten::mm") == 2);
  CHECK(launches_named(log, "aten::view") == 0);
  CHECK(launches_named(log, "aten::matmul") == 0);
  CHECK(launches_named(log, "aten::contiguous") == 0);
  const Launch& mm = launch_named(log, "aten::mm");
  CHECK(mm.cost.product);
  CHECK(mm.cost.flops == 2.0 * 8 * 16 * 4);
  CHECK(mm.cost.bytes_read == (8 * 16 + 16 * 4) * 4);
  CHECK(mm.cost.bytes_written == 8 * 4 * 4);
  const Launch& add = launch_named(log, "aten::add");
  CHECK_FALSE(add.cost.product);
  CHECK(add.cost.flops == 0);
  CHECK(add.cost.bytes_read == 2 * 32 * 4);
  CHECK(add.cost.bytes_written == 32 * 4);
  const Launch& add_ = launch_named(log, "aten::add_");
  CHECK(add_.cost.bytes_read == 2 * 32 * 4);
  CHECK(add_.cost.bytes_written == 32 * 4);
  CHECK(launches_named(log, "aten::copy_") == 2);  // e.copy_ and contiguous's copy
  const Launch& copy = launch_named(log, "aten::copy_");
  CHECK(copy.cost.bytes_read == 32 * 4);
  CHECK(copy.cost.bytes_written == 32 * 4);
  CHECK(log.host_syncs.empty());
  CHECK_FALSE(log.backward_ran);
}

TEST_CASE("census: host syncs by name, and an out= argument is written, not read") {
  const at::Tensor a = at::randn({4, 4});
  at::Tensor out = at::empty({4, 4});
  CensusLog log;
  {
    OpCensus census;
    at::mul_out(out, a, a);
    (void)a.sum().item<float>();
    log = census.finish();
  }
  const Launch& mul = launch_named(log, "aten::mul");
  CHECK(mul.cost.bytes_read == 2 * 16 * 4);
  CHECK(mul.cost.bytes_written == 16 * 4);
  CHECK(log.host_syncs["aten::item"] == 1);
  CHECK(log.host_syncs["aten::_local_scalar_dense"] == 1);
  CHECK(launches_named(log, "aten::item") == 0);
  CHECK(launches_named(log, "aten::sum") == 1);
}

TEST_CASE("census: causal attention counts the visible half, backward 2.5x, one launch each") {
  const int64_t B = 1, H = 2, T = 8, D = 4;
  const at::Tensor q = at::randn({B, H, T, D}).requires_grad_(true), k = at::randn({B, H, T, D}),
                   v = at::randn({B, H, T, D});
  CensusLog log;
  {
    OpCensus census;
    at::Tensor y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    y.sum().backward();
    log = census.finish();
  }
  double forward = 0, backward = 0;
  int64_t products = 0;
  for (const Launch& l : log.launches) {
    if (!l.cost.product) continue;
    ++products;
    (l.backward ? backward : forward) += l.cost.flops;
  }
  CHECK(products == 2);  // the fused kernel and its backward, nothing of their insides
  CHECK(forward == 4.0 * B * H * T * T * D / 2);
  CHECK(backward == 2.5 * forward);
}

TEST_CASE("census: regions from user scopes, backward in its forward op's region, saved tensors by dtype") {
  const at::Tensor a = at::randn({8, 16});
  const at::Tensor w = at::randn({16, 4}).requires_grad_(true);
  CensusLog log;
  {
    OpCensus census;
    at::Tensor z;
    {
      RECORD_USER_SCOPE("block.0");
      z = at::relu(at::mm(a, w));  // relu keeps its (8, 4) float result for backward
    }
    at::Tensor loss = z.sum();
    loss.backward();
    at::Tensor after = w.grad() * 2;  // after the last backward node: the optimizer's place
    log = census.finish();
  }
  REQUIRE(log.backward_ran);
  int64_t block_forward = 0, block_backward = 0;
  for (const Launch& l : log.launches) {
    if (l.region != "block.0") continue;
    (l.backward ? block_backward : block_forward) += 1;
  }
  CHECK(block_forward == 2);   // mm, relu
  CHECK(block_backward >= 2);  // relu's backward, the mm for w's gradient
  bool backward_mm_in_block = false;
  for (const Launch& l : log.launches)
    backward_mm_in_block = backward_mm_in_block || (l.name == "aten::mm" && l.backward && l.region == "block.0");
  CHECK(backward_mm_in_block);
  CHECK(launch_named(log, "aten::sum").region == "other");
  CHECK(launch_named(log, "aten::mul").region == "optimizer");
  int64_t saved_float = 0;
  for (const SavedTensor& t : log.saved)
    if (t.dtype == at::kFloat && t.region == "block.0") saved_float += t.bytes;
  CHECK(saved_float >= 8 * 4 * 4);
}

TEST_CASE("census: the roofline on a named GPU and the last line's format") {
  const GpuSpec& h100 = gpu_spec("h100");
  CHECK(h100.bf16_tflops == 989);
  CHECK(h100.hbm_tb_s == 3.35);
  CHECK(gpu_spec("a100").bf16_tflops == 312);
  CHECK_THROWS_AS(gpu_spec("v100"), spmd::UsageError);
  const Roofline r = roofline(h100, kProductFraction * 989e12, kBandwidthFraction * 3.35e12);
  CHECK(r.product_ms == doctest::Approx(1000));
  CHECK(r.memory_ms == doctest::Approx(1000));
  CHECK(roofline_mfu(h100, kProductFraction * 989e12, r) == doctest::Approx(kProductFraction / 2));
  CensusSummary sum;
  sum.gpu = h100;
  sum.bytes_outside = 2340000000;
  sum.product_flops = 1.2345e12;
  sum.launches = 42;
  sum.estimate.product_ms = 10;
  sum.estimate.memory_ms = 2.5;
  sum.mfu = 0.456;
  CHECK(census_line(sum) ==
        "census: 2.3 GB outside products, 1.23 TFLOP in products, 42 launches, 12.5 ms on H100 SXM (45.6 % MFU)");
}
