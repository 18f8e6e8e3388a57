// The device-side pieces a GPU step runs, against their CPU forms: the dropout mask drawn on the
// GPU by the NVRTC-compiled kernel (same bits), the foreach gradient norm (double accumulation),
// the fused AdamW, and packed documents' attention (SDPA with a block-diagonal causal mask).
#include <ATen/ATen.h>
#ifdef SPMD_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernels/kernels.h"
#include "optim/adamw.h"
#include "parallel/counter_rng.h"

#include "doctest_check.h"
#include "skip_without_gpu.h"

using namespace spmd;
using spmd::test::skip_without_gpu;

TEST_CASE("cuda kernels: the dropout mask drawn on the GPU has the CPU's bits") {
  if (skip_without_gpu()) return;
  // The NVRTC kernel (kernels/cuda/counter_dropout.cuh) against the CPU loop, every bit: a 4-D
  // attention block at offsets in every dimension, 2-D and 3-D activations, odd sizes, a 0-dim and
  // an empty block, several p.
  struct Block {
    std::vector<int64_t> global, local, offset;
  };
  const std::vector<Block> blocks{
      {{8, 12, 256, 256}, {4, 6, 256, 256}, {4, 6, 0, 0}},
      {{5, 7, 33, 65}, {2, 3, 17, 31}, {3, 2, 9, 30}},
      {{6, 70}, {3, 35}, {2, 35}},
      {{4, 6, 70}, {2, 3, 35}, {1, 0, 35}},
      {{64, 12, 1024, 1024}, {1, 2, 3, 1024}, {63, 10, 1021, 0}},  // global indices past 2^32
      {{}, {}, {}},
      {{4, 0, 8}, {2, 0, 8}, {1, 0, 0}},
  };
  const c10::Device cuda(c10::kCUDA, 0);
  for (double p : {0.1, 0.5, 0.9}) {
    for (const Block& b : blocks) {
      CAPTURE(p);
      CAPTURE(b.local);
      CAPTURE(b.offset);
      const uint64_t stream = stream_id("h.3.attn_dropout@step7");
      const at::Tensor cpu = dropout_mask_block(b.local, b.global, b.offset, 42, stream, p);
      const at::Tensor gpu = dropout_mask_block_on(cuda, b.local, b.global, b.offset, 42, stream, p);
      CHECK(gpu.is_cuda());
      CHECK(gpu.sizes() == cpu.sizes());
      CHECK(at::equal(gpu.cpu(), cpu));
    }
  }
}

TEST_CASE("cuda kernels: a GPU dropout mask of more than 2^24 elements, on a side stream, has the CPU's bits") {
  if (skip_without_gpu()) return;
#ifdef SPMD_WITH_CUDA  // (skip_without_gpu stops a build without CUDA above)
  // 3 x 12 x 1024 x 1024 = 37.7M elements: many grid-stride rounds per thread.
  const std::vector<int64_t> global{8, 12, 1024, 1024}, local{3, 12, 1024, 1024}, offset{5, 0, 0, 0};
  const c10::Device cuda(c10::kCUDA, 0);
  const at::Tensor cpu = dropout_mask_block(local, global, offset, 8, 1, 0.2);
  // Drawn on the current stream: a side stream's work is ordered by that stream alone.
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, 0);
  at::Tensor gpu;
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    gpu = dropout_mask_block_on(cuda, local, global, offset, 8, 1, 0.2);
  }
  side.synchronize();
  CHECK(at::equal(gpu.cpu(), cpu));
#endif
}

TEST_CASE("cuda kernels: the foreach gradient norm equals the CPU's double sum") {
  if (skip_without_gpu()) return;
  at::manual_seed(9);
  std::vector<at::Tensor> cpu, gpu;
  for (int64_t n : {768 * 2304, 768, 50304 * 768 / 64, 3}) {
    cpu.push_back(at::randn({n}));
    gpu.push_back(cpu.back().cuda());
  }
  const double on_cpu = kernels::sum_of_squares(cpu, at::kCPU).item<double>();
  const at::Tensor on_gpu = kernels::sum_of_squares(gpu, c10::Device(c10::kCUDA, 0));
  CHECK(on_gpu.is_cuda());
  CHECK((on_gpu.scalar_type() == at::kDouble));
  CHECK(on_gpu.item<double>() == doctest::Approx(on_cpu).epsilon(1e-12));
}

TEST_CASE("cuda kernels: the fused AdamW on the GPU equals ours on the CPU to 1e-6") {
  if (skip_without_gpu()) return;
  TrainConfig config;
  config.weight_decay = 0.1;
  at::manual_seed(4);
  const at::Tensor w = at::randn({256, 64}) * 0.02;
  at::Tensor host = w.clone().set_requires_grad(true), device = w.cuda().set_requires_grad(true);
  AdamW on_host({host}, {true}, config), on_device({device}, {true}, config);
  for (int step = 0; step < 5; ++step) {
    const at::Tensor g = at::randn({256, 64});
    host.mutable_grad() = g.clone();
    device.mutable_grad() = g.cuda();
    on_host.step(1e-3, 0.5);
    on_device.step_on_device(1e-3, at::full({}, 0.5, device.options().dtype(at::kDouble)),
                             at::ones({}, device.options().dtype(at::kBool)));
  }
  CHECK(at::allclose(device.detach().cpu(), host.detach(), 1e-6, 1e-7));
  CHECK(on_device.steps_taken() == 5);
}

TEST_CASE("cuda kernels: packed documents' attention on the GPU (SDPA, bf16, dropout) equals the CPU's fused kernel") {
  if (skip_without_gpu()) return;
  at::manual_seed(13);
  const int64_t B = 3, T = 96, H = 4, D = 16;
  // Documents of 1 to 20 tokens: starts rise along each row, a window may begin mid-document.
  at::Tensor starts = at::zeros({B, T}, at::kLong);
  auto st = starts.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 1, start = 0; t < T; ++t) {
      if (at::randint(0, 8, {1}).item<int64_t>() == 0) start = t;
      st[b][t] = start;
    }
  const at::Tensor qkv = at::randn({B, T, 3, H, D});
  const at::Tensor grad_out = at::randn({B, T, H, D});
  const at::Tensor mask = (at::rand({B, H, T, T}) > 0.1).to(at::kFloat) / 0.9;
  const c10::Device cuda(c10::kCUDA, 0);
  for (const at::Tensor& dropout : {at::Tensor(), mask}) {
    CAPTURE(dropout.defined());
    auto run = [&](const c10::Device& device, at::ScalarType operands) {
      at::Tensor x = qkv.to(device).requires_grad_(true);
      const at::Tensor m = dropout.defined() ? dropout.to(device) : at::Tensor();
      at::Tensor y = kernels::causal_attention(x, m, operands, starts.to(device));
      y.backward(grad_out.to(device));
      return std::make_pair(y.detach().cpu(), x.grad().cpu());
    };
    const auto [y_cpu, g_cpu] = run(at::kCPU, at::kFloat);
    const auto [y_gpu, g_gpu] = run(cuda, at::kFloat);
    CHECK(at::allclose(y_gpu, y_cpu, 1e-4, 1e-5));
    CHECK(at::allclose(g_gpu, g_cpu, 1e-3, 1e-4));
    const auto [y_bf16, g_bf16] = run(cuda, at::kBFloat16);
    CHECK((y_bf16 - y_cpu).abs().max().item<double>() < 0.05);
    CHECK((g_bf16 - g_cpu).abs().max().item<double>() < 0.2);
  }
}

TEST_CASE("cuda kernels: the head's GPU calls (fp32-output products, the softmax cross-entropy kernel) equal their CPU stand-ins") {
  if (skip_without_gpu()) return;
  // at::mm / at::addmm_out with out_dtype float32 (cuBLAS) and the NVRTC kernel
  // (kernels/cuda/softmax_cross_entropy.cuh) against the stand-ins the CPU runs in their place
  // (kernels/gpu_stand_ins.h): the same numbers up to the order of float32 sums.
  at::manual_seed(13);
  const c10::Device cuda(c10::kCUDA, 0);
  const int64_t n = 300, C = 64, V = 50304, valid = 50257;
  const at::Tensor x = at::randn({n, C}).to(at::kBFloat16), w = at::randn({C, V}).mul_(0.2).to(at::kBFloat16);
  const at::Tensor z_cpu = kernels::product_float_out(x, w);
  const at::Tensor z_gpu = kernels::product_float_out(x.to(cuda), w.to(cuda));
  CHECK((z_gpu.scalar_type() == at::kFloat));
  CHECK(at::allclose(z_gpu.cpu(), z_cpu, 1e-5, 1e-4));

  at::Tensor targets = at::randint(0, valid, {n}, at::kLong);
  targets[7] = -1;
  const auto cpu = kernels::softmax_cross_entropy(z_cpu, targets, valid, true, at::kBFloat16);
  const auto gpu = kernels::softmax_cross_entropy(z_cpu.to(cuda), targets.to(cuda), valid, true, at::kBFloat16);
  CHECK(at::allclose(gpu.losses.cpu(), cpu.losses, 1e-5, 1e-5));
  // Both round the same float32 value once to bf16; float32 differences may flip a rounding.
  CHECK(at::allclose(gpu.grad.cpu().to(at::kFloat), cpu.grad.to(at::kFloat), 1.0 / 128, 1e-8));
  CHECK(at::equal(gpu.grad.narrow(1, valid, V - valid).cpu(), cpu.grad.narrow(1, valid, V - valid)));

  const at::Tensor table = at::randn({V, C});
  const at::Tensor acc_cpu = table.clone(), acc_gpu = table.to(cuda);
  kernels::add_product_float_out(acc_cpu.t(), x.t(), cpu.grad, 1.0 / n);
  kernels::add_product_float_out(acc_gpu.t(), x.to(cuda).t(), cpu.grad.to(cuda), 1.0 / n);
  CHECK(at::allclose(acc_gpu.cpu(), acc_cpu, 1e-5, 1e-5));
}

TEST_CASE("cuda kernels: the residual add + LayerNorm / RMSNorm kernels equal their CPU stand-in, values and gradients") {
  if (skip_without_gpu()) return;
  at::manual_seed(15);
  const c10::Device cuda(c10::kCUDA, 0);
  for (const bool rms : {false, true})
   for (const bool with_delta : {true, false}) {
    CAPTURE(rms);
    CAPTURE(with_delta);
    const at::Tensor x0 = at::randn({4, 300, 768});
    const at::Tensor delta0 = with_delta ? at::randn({4, 300, 768}).to(at::kBFloat16) : at::Tensor();
    const at::Tensor w0 = at::randn({768}), b0 = rms ? at::Tensor() : at::randn({768});
    const at::Tensor d_sum = at::randn({4, 300, 768}), d_normed = at::randn({4, 300, 768}).to(at::kBFloat16);
    struct Run {
      at::Tensor sum, normed, dx, ddelta, dw, db;
    };
    auto run = [&](c10::Device device) {
      at::Tensor x = x0.to(device).requires_grad_(true);
      at::Tensor delta = with_delta ? delta0.to(device).requires_grad_(true) : at::Tensor();
      at::Tensor w = w0.to(device).requires_grad_(true), b = rms ? at::Tensor() : b0.to(device).requires_grad_(true);
      const auto r = kernels::residual_norm(x, delta, w, b, 1e-5, rms, at::kBFloat16);
      (r.sum * d_sum.to(device) + r.normed.to(at::kFloat) * d_normed.to(device).to(at::kFloat)).sum().backward();
      return Run{r.sum.cpu(), r.normed.cpu(), x.grad().cpu(), with_delta ? delta.grad().cpu() : at::Tensor(), w.grad().cpu(),
                 rms ? at::Tensor() : b.grad().cpu()};
    };
    const Run cpu = run(c10::Device(c10::kCPU)), gpu = run(cuda);
    CHECK(at::equal(gpu.sum, cpu.sum));
    CHECK(at::allclose(gpu.normed.to(at::kFloat), cpu.normed.to(at::kFloat), 1.0 / 128, 1e-3));
    CHECK(at::allclose(gpu.dx, cpu.dx, 1e-4, 1e-4));
    if (with_delta) CHECK(at::allclose(gpu.ddelta.to(at::kFloat), cpu.ddelta.to(at::kFloat), 1.0 / 128, 1e-3));
    CHECK(at::allclose(gpu.dw, cpu.dw, 1e-4, 1e-3));
    if (!rms) CHECK(at::allclose(gpu.db, cpu.db, 1e-4, 1e-3));
  }
}

TEST_CASE("cuda kernels: the rotary and SwiGLU kernels equal their CPU stand-ins, values and gradients") {
  if (skip_without_gpu()) return;
  at::manual_seed(19);
  const c10::Device cuda(c10::kCUDA, 0);
  const at::Tensor angles = at::rand({1, 64, 1, 32}) * 6, full = at::cat({angles, angles}, -1);
  const at::Tensor cos = full.cos(), sin = full.sin();
  const at::Tensor x0 = at::randn({4, 64, 6, 64}).to(at::kBFloat16), dy = at::randn({4, 64, 6, 64}).to(at::kBFloat16);
  auto rotate = [&](c10::Device device) {
    at::Tensor x = x0.to(device).requires_grad_(true);
    const at::Tensor y = kernels::rotary(x, cos.to(device), sin.to(device));
    y.backward(dy.to(device));
    return std::make_pair(y.cpu().to(at::kFloat), x.grad().cpu().to(at::kFloat));
  };
  const auto [y_cpu, dx_cpu] = rotate(c10::Device(c10::kCPU));
  const auto [y_gpu, dx_gpu] = rotate(cuda);
  CHECK(at::allclose(y_gpu, y_cpu, 1.0 / 128, 1e-3));
  CHECK(at::allclose(dx_gpu, dx_cpu, 1.0 / 128, 1e-3));

  kernels::use_cpu_kernels(CpuKernels::kGeneric);  // the CPU's generic path: the stand-in
  const at::Tensor g0 = at::randn({300, 1536}).to(at::kBFloat16), u0 = at::randn({300, 1536}).to(at::kBFloat16);
  const at::Tensor d_out = at::randn({300, 1536}).to(at::kBFloat16);
  auto glu = [&](c10::Device device) {
    at::Tensor g = g0.to(device).requires_grad_(true), u = u0.to(device).requires_grad_(true);
    const at::Tensor y = kernels::swiglu(g, u);
    y.backward(d_out.to(device));
    return std::vector<at::Tensor>{y.cpu().to(at::kFloat), g.grad().cpu().to(at::kFloat), u.grad().cpu().to(at::kFloat)};
  };
  const auto cpu = glu(c10::Device(c10::kCPU)), gpu = glu(cuda);
  kernels::use_cpu_kernels(CpuKernels::kFused);
  for (size_t i = 0; i < cpu.size(); ++i) CHECK(at::allclose(gpu[i], cpu[i], 1.0 / 128, 1e-3));
}
