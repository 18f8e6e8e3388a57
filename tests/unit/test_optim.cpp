// AdamW against libtorch's own torch::optim::AdamW, and the learning-rate schedule's shape.
#include <algorithm>
#include <cmath>

#include <torch/optim/adamw.h>

#include "model/params.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"

#include "doctest_check.h"

using namespace spmd;

TEST_CASE("optim: AdamW matches torch::optim::AdamW step for step (decay on matrices only)") {
  TrainConfig config;
  config.beta1 = 0.9;
  config.beta2 = 0.99;
  config.weight_decay = 0.1;
  at::manual_seed(0);
  at::Tensor w0 = at::randn({4, 3}), b0 = at::randn({3});
  at::Tensor w = w0.clone().set_requires_grad(true), b = b0.clone().set_requires_grad(true);
  at::Tensor tw = w0.clone().set_requires_grad(true), tb = b0.clone().set_requires_grad(true);
  AdamW ours({w, b}, {true, false}, config);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{tw},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-2).betas({0.9, 0.99}).weight_decay(0.1)));
  groups.emplace_back(std::vector<at::Tensor>{tb},
                      std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-2).betas({0.9, 0.99}).weight_decay(0.0)));
  torch::optim::AdamW reference(groups, torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < 5; ++step) {
    at::Tensor gw = at::sin(at::arange(12, at::kFloat).reshape({4, 3}) * (step + 1)),
               gb = at::cos(at::arange(3, at::kFloat) * (step + 1));
    w.mutable_grad() = gw.clone();
    b.mutable_grad() = gb.clone();
    tw.mutable_grad() = gw.clone();
    tb.mutable_grad() = gb.clone();
    ours.step(1e-2);
    reference.step();
    CHECK(at::allclose(w, tw, 1e-6, 1e-7));
    CHECK(at::allclose(b, tb, 1e-6, 1e-7));
  }
  CHECK(ours.steps_taken() == 5);
  CHECK_FALSE(at::allclose(w, w0));
}

TEST_CASE("optim: the one-pass update on a large tensor, with a clipping factor, matches torch::optim::AdamW") {
  TrainConfig config;
  config.beta2 = 0.99;
  config.weight_decay = 0.1;
  at::manual_seed(1);
  at::Tensor w0 = at::randn({300, 200});  // several parallel chunks
  at::Tensor w = w0.clone().set_requires_grad(true), tw = w0.clone().set_requires_grad(true);
  AdamW ours({w}, {true}, config);
  torch::optim::AdamW reference({tw}, torch::optim::AdamWOptions(3e-3).betas({0.9, 0.99}).weight_decay(0.1));
  for (int step = 0; step < 4; ++step) {
    at::Tensor g = at::randn({300, 200});
    const double scale = 0.25 * (step + 1);
    w.mutable_grad() = g.clone();
    tw.mutable_grad() = g * scale;  // the reference gets the clipped gradient itself
    ours.step(3e-3, scale);
    reference.step();
    CHECK(at::allclose(w, tw, 1e-5, 1e-6));
    CHECK(at::equal(w.grad(), g));  // ours leaves the gradient as it was
  }
}

TEST_CASE("optim: warmup, cosine decay to min_lr, then min_lr") {
  TrainConfig c;
  c.lr = 1e-3;
  c.min_lr = 1e-4;
  c.warmup_steps = 10;
  c.decay_steps = 110;
  CHECK(learning_rate_at(c, 0) == doctest::Approx(1e-3 / 11));
  CHECK(learning_rate_at(c, 9) == doctest::Approx(1e-3 * 10 / 11));
  CHECK(learning_rate_at(c, 10) == doctest::Approx(1e-3));
  CHECK(learning_rate_at(c, 60) == doctest::Approx(1e-4 + 0.5 * (1e-3 - 1e-4)));
  CHECK(learning_rate_at(c, 110) == doctest::Approx(1e-4));
  CHECK(learning_rate_at(c, 500) == doctest::Approx(1e-4));
}

TEST_CASE("optim: wsd, linear and constant schedules: warmup from min_lr, then their phases") {
  TrainConfig c;
  c.lr = 1e-3;
  c.min_lr = 1e-4;
  c.steps = 100;
  c.warmup_steps = 10;
  c.decay_steps = 20;
  c.lr_schedule = LrSchedule::kWsd;
  // Warmup from min_lr (update 0) towards lr; stable until update 80; decay over updates 80..99.
  CHECK(learning_rate_at(c, 0) == doctest::Approx(1e-4));
  CHECK(learning_rate_at(c, 5) == doctest::Approx(1e-4 + 0.5 * 9e-4));
  CHECK(learning_rate_at(c, 10) == 1e-3);
  CHECK(learning_rate_at(c, 79) == 1e-3);
  CHECK(learning_rate_at(c, 90) == doctest::Approx(1e-4 + 0.5 * 9e-4));  // linear: halfway down
  CHECK(learning_rate_at(c, 100) == doctest::Approx(1e-4));
  c.decay_shape = DecayShape::kOneMinusSqrt;
  CHECK(learning_rate_at(c, 85) == doctest::Approx(1e-4 + (1 - std::sqrt(0.25)) * 9e-4));
  c.decay_shape = DecayShape::kCosine;
  CHECK(learning_rate_at(c, 85) == doctest::Approx(1e-4 + 0.5 * (1 + std::cos(M_PI * 0.25)) * 9e-4));
  c.steps = 200;  // a longer run decays at its own end
  CHECK(learning_rate_at(c, 170) == 1e-3);
  CHECK(learning_rate_at(c, 190) == doctest::Approx(1e-4 + 0.5 * 9e-4));

  c.lr_schedule = LrSchedule::kLinear;  // decay_steps is where it reaches min_lr
  c.decay_steps = 50;
  CHECK(learning_rate_at(c, 30) == doctest::Approx(1e-4 + 0.5 * 9e-4));
  CHECK(learning_rate_at(c, 50) == doctest::Approx(1e-4));
  CHECK(learning_rate_at(c, 150) == doctest::Approx(1e-4));
  c.lr_schedule = LrSchedule::kConstant;
  CHECK(learning_rate_at(c, 5) == doctest::Approx(1e-4 + 0.5 * 9e-4));
  CHECK(learning_rate_at(c, 10) == 1e-3);
  CHECK(learning_rate_at(c, 199) == 1e-3);
}

TEST_CASE("optim: weight decay goes to weight matrices and embeddings, never to biases or LayerNorm") {
  ModelConfig model;
  model.vocab_size = 72;
  model.block_size = 16;
  model.n_layer = 2;
  model.n_head = 4;
  model.n_embd = 32;
  model.bias = true;
  int decayed = 0;
  for (const auto& p : param_table(model, 72)) {
    CAPTURE(p.name);
    const bool bias_or_norm = p.name.find(".bias") != std::string::npos || p.name.find("ln_") != std::string::npos;
    CHECK(p.weight_decay == !bias_or_norm);  // c_attn.bias is 3-D here and still not decayed
    decayed += p.weight_decay;
  }
  CHECK(decayed == 2 + 2 * 4);  // wte, wpe, and 4 weights per layer
}

TEST_CASE("optim: the on-device update (lazy reads, CUDA) equals the host-decided one, and skips where told") {
  // step_on_device is the path CUDA runs; its numbers are libtorch ops on any device, so the CPU
  // checks them: applied steps equal step(), refused steps change neither p, m, v nor t.
  TrainConfig config;
  config.beta2 = 0.99;
  config.weight_decay = 0.1;
  at::manual_seed(1);
  at::Tensor w0 = at::randn({64, 33});
  at::Tensor host = w0.clone().set_requires_grad(true), device = w0.clone().set_requires_grad(true);
  AdamW on_host({host}, {true}, config), on_device({device}, {true}, config);
  const at::Tensor yes = at::ones({}, at::kBool), no = at::zeros({}, at::kBool);
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    at::Tensor g = at::sin(at::arange(64 * 33, at::kFloat).reshape({64, 33}) * (step + 1));
    host.mutable_grad() = g.clone();
    device.mutable_grad() = g.clone();
    const double scale = step % 2 ? 0.5 : 1.0;
    if (step == 3) {  // a refused step: nothing moves
      const at::Tensor before = device.detach().clone(), m = on_device.exp_avg()[0].clone();
      on_device.step_on_device(1e-2, at::full({}, scale, at::kDouble), no);
      CHECK(at::equal(device, before));
      CHECK(at::equal(on_device.exp_avg()[0], m));
      CHECK(on_device.steps_taken() == 3);
      continue;
    }
    on_host.step(1e-2, scale);
    on_device.step_on_device(1e-2, at::full({}, scale, at::kDouble), yes);
    CHECK(at::allclose(device, host, 1e-6, 1e-7));
    CHECK(at::allclose(on_device.exp_avg_sq()[0], on_host.exp_avg_sq()[0], 1e-6, 1e-12));
  }
  CHECK(on_device.steps_taken() == on_host.steps_taken());
  CHECK(on_device.steps_taken() == 5);
}

TEST_CASE("optim: libtorch's fused AdamW (the on-device update) equals ours to 1e-6 over many parameters") {
  // step_on_device runs at::_fused_adamw_, one call per weight-decay group; step() runs our fused
  // CPU kernel. Matrices decay, vectors do not; clipping factors vary; one step is refused.
  TrainConfig config;
  config.weight_decay = 0.1;
  at::manual_seed(3);
  const std::vector<std::vector<int64_t>> shapes{{96, 32}, {32}, {32, 128}, {128}, {7}, {50, 32}};
  std::vector<at::Tensor> ours, fused;
  std::vector<bool> decay;
  for (const auto& shape : shapes) {
    const at::Tensor w = at::randn(shape) * 0.02;
    ours.push_back(w.clone().set_requires_grad(true));
    fused.push_back(w.clone().set_requires_grad(true));
    decay.push_back(shape.size() == 2);
  }
  AdamW on_host(ours, decay, config), on_device(fused, decay, config);
  const at::Tensor yes = at::ones({}, at::kBool), no = at::zeros({}, at::kBool);
  // Elementwise relative differences are meaningless where a moment cancels to ~0: compare
  // against the tensor's scale.
  auto relative_difference = [](const at::Tensor& a, const at::Tensor& b) {
    return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
  };
  double worst = 0;
  for (int step = 0; step < 12; ++step) {
    CAPTURE(step);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const at::Tensor g = at::randn(shapes[i]) * (step % 3 + 1);
      ours[i].mutable_grad() = g.clone();
      fused[i].mutable_grad() = g.clone();
    }
    const double clip = step % 4 == 1 ? 0.37 : 1.0;
    const double lr = 6e-4 * (step + 1);
    if (step == 5) {
      on_device.step_on_device(lr, at::full({}, clip, at::kDouble), no);
      continue;
    }
    on_host.step(lr, clip);
    on_device.step_on_device(lr, at::full({}, clip, at::kDouble), yes);
    for (size_t i = 0; i < shapes.size(); ++i) {
      CAPTURE(i);
      CHECK(relative_difference(fused[i], ours[i]) < 1e-6);
      CHECK(relative_difference(on_device.exp_avg()[i], on_host.exp_avg()[i]) < 1e-6);
      CHECK(relative_difference(on_device.exp_avg_sq()[i], on_host.exp_avg_sq()[i]) < 1e-6);
      worst = std::max({worst, relative_difference(fused[i], ours[i]),
                        relative_difference(on_device.exp_avg()[i], on_host.exp_avg()[i]),
                        relative_difference(on_device.exp_avg_sq()[i], on_host.exp_avg_sq()[i])});
    }
  }
  CHECK(on_device.steps_taken() == 11);
  CHECK(on_host.steps_taken() == 11);
  MESSAGE("fused AdamW vs ours: largest max|a - b| / max|b| over parameters and moments " << worst);
}
