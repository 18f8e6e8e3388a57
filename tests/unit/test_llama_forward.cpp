// The Llama forward's pieces against direct formulas: rotary embeddings (Hugging Face's
// rotate_half pairing, Llama 3's frequency scaling), RMSNorm with float32 statistics, and
// grouped-query attention against multi-head attention whose key/value heads were repeated
// explicitly; decoding with a key/value cache of n_kv_head heads against the whole forward.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "config/config.h"
#include "experts/router.h"
#include "experts/step_routing.h"
#include "kernels/kernels.h"
#include "model/llama.h"
#include "model/params.h"
#include "model/rope.h"
#include "model/sparse_mlp.h"

#include "doctest_check.h"

using namespace spmd;

namespace {

// ModelOps on one process with plain ATen: no sharding, no dropout.
class PlainOps : public ModelOps {
 public:
  std::map<std::string, at::Tensor> params;
  int64_t vocab = 0;

  at::Tensor param(const std::string& name) override { return params.at(name); }
  bool has_param(const std::string& name) const override { return params.count(name) > 0; }
  at::Tensor dense(const at::Tensor& x, const std::string& weight, const std::string& bias, int64_t n) override {
    const at::Tensor w = params.at(weight);
    int64_t k = 1;
    for (int64_t d = 0; d < n; ++d) k *= w.size(d);
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - n);
    shape.insert(shape.end(), w.sizes().begin() + n, w.sizes().end());
    at::Tensor y = at::mm(x.reshape({-1, k}), w.reshape({k, -1})).view(shape);
    return bias.empty() ? y : y + params.at(bias);
  }
  at::Tensor layer_norm(const at::Tensor& x, const std::string& w, const std::string& b, double eps) override {
    return at::layer_norm(x, {x.size(-1)}, params.at(w), b.empty() ? at::Tensor() : params.at(b), eps);
  }
  at::Tensor rms_norm(const at::Tensor& x, const std::string& weight, double eps) override {
    return kernels::rms_norm(x, params.at(weight), eps);
  }
  at::Tensor positions(int64_t length, int64_t first, const at::Tensor& starts) override {
    at::Tensor p = (at::arange(length, at::kLong) + first).unsqueeze(0);
    return starts.defined() ? p - starts : p;
  }
  at::Tensor embed(const std::string& table, const at::Tensor& ids) override { return at::embedding(params.at(table), ids); }
  at::Tensor tied_head_loss(const at::Tensor& x, const std::string& table, const at::Tensor& targets) override {
    const at::Tensor logits = at::matmul(x, params.at(table).t()).narrow(-1, 0, vocab);
    return at::cross_entropy_loss(logits.reshape({-1, vocab}), targets.reshape({-1}));
  }
  at::Tensor tied_head_row_losses(const at::Tensor&, const std::string&, const at::Tensor&) override { return {}; }
  at::Tensor tied_head_logits(const at::Tensor& x, const std::string& table) override {
    return at::matmul(x, params.at(table).t()).narrow(-1, 0, vocab);
  }
  at::Tensor causal_attention(const at::Tensor& qkv, const std::string&, const at::Tensor& starts) override {
    return kernels::causal_attention(qkv, at::Tensor(), at::kFloat, starts);
  }
  at::Tensor attention_over_prefix(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) override {
    return kernels::attention_over_prefix(q, k, v);
  }
  at::Tensor swiglu(const at::Tensor& gate_up) override {
    const int64_t F = gate_up.size(-1) / 2;
    return at::silu(gate_up.narrow(-1, 0, F)) * gate_up.narrow(-1, F, F);
  }
  at::Tensor bias_gelu(const at::Tensor& h, const std::string&) override { return kernels::bias_gelu(h); }
  at::Tensor dropout(const at::Tensor& x, const std::string&, const std::vector<std::string>&) override { return x; }
  at::Tensor block(const at::Tensor& x, std::function<at::Tensor(const at::Tensor&)> body) override { return body(x); }
  at::Tensor constrain(const at::Tensor& x, const std::vector<std::string>&) override { return x; }
};

ModelConfig tiny_llama(int64_t kv_heads) {
  ModelConfig m;
  m.arch = ModelArch::kLlama;
  m.vocab_size = 40, m.block_size = 16, m.n_layer = 2, m.n_head = 4, m.n_embd = 32;
  m.n_kv_head = kv_heads, m.intermediate_size = 48, m.bias = false, m.tie_embeddings = false;
  return m;
}

// Random parameters for the table, norm scales away from 1 so that a missing scale shows.
PlainOps random_ops(const ModelConfig& m) {
  PlainOps ops;
  ops.vocab = m.vocab_size;
  at::manual_seed(3);
  for (const auto& p : param_table(m, m.vocab_size))
    ops.params[p.name] = p.init == ParamInit::kOnes ? 1 + 0.5 * at::randn(p.shape) : 0.2 * at::randn(p.shape);
  return ops;
}

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("llama rope: each dim i turns with dim i + D/2 by position x theta^(-2i/D)") {
  ModelConfig m = tiny_llama(2);  // head_dim 8
  m.rope_theta = 500.0;
  const int64_t B = 2, T = 5, H = 3, D = m.head_dim();
  at::manual_seed(1);
  const at::Tensor x = at::randn({B, T, H, D}, at::kDouble);
  const at::Tensor positions = at::tensor(std::vector<int64_t>{0, 3, 7, 2, 11, 4, 0, 1, 9, 6}).view({B, T});
  const at::Tensor got = apply_rope(x.to(at::kFloat), rope_angles(positions, rope_inverse_frequencies(m))).to(at::kDouble);
  auto xa = x.accessor<double, 4>();
  auto ga = got.accessor<double, 4>();
  auto pa = positions.accessor<int64_t, 2>();
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double angle = static_cast<double>(pa[b][t]) * std::pow(500.0, -2.0 * static_cast<double>(i) / D);
          const double a = xa[b][t][h][i], c = xa[b][t][h][i + D / 2];
          worst = std::max(worst, std::abs(ga[b][t][h][i] - (a * std::cos(angle) - c * std::sin(angle))));
          worst = std::max(worst, std::abs(ga[b][t][h][i + D / 2] - (c * std::cos(angle) + a * std::sin(angle))));
        }
  CHECK(worst < 1e-5);
}

TEST_CASE("llama rope: Llama 3 scaling keeps short wavelengths, divides long ones by factor, blends between") {
  ModelConfig m = tiny_llama(2);
  m.n_embd = 4 * 128;  // head_dim 128, as Llama 3's
  m.rope_theta = 500000;
  m.rope_scaling = {8, 1, 4, 8192};
  const at::Tensor got = rope_inverse_frequencies(m);
  REQUIRE(got.size(0) == 64);
  ModelConfig plain = m;
  plain.rope_scaling = {};
  const at::Tensor base = rope_inverse_frequencies(plain);
  int kept = 0, divided = 0, blended = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double f = base[i].item<double>(), g = got[i].item<double>();
    const double wavelength = 2 * M_PI / f;
    double want = f;  // Meta's apply_scaling, stated over wavelengths
    if (wavelength > 8192.0 / 1) {
      want = f / 8, ++divided;
    } else if (wavelength >= 8192.0 / 4) {
      const double smooth = (8192.0 / wavelength - 1) / (4 - 1);
      want = (1 - smooth) * f / 8 + smooth * f, ++blended;
    } else {
      ++kept;
    }
    CAPTURE(i);
    CHECK(std::abs(g - want) <= 1e-6 * want);
  }
  CHECK(kept > 0);  // the three regimes all occur for these numbers
  CHECK(divided > 0);
  CHECK(blended > 0);
}

TEST_CASE("llama rmsnorm: x / sqrt(mean(x^2) + eps) x scale, statistics in float32 for bfloat16 input") {
  at::manual_seed(2);
  const at::Tensor x = at::randn({3, 7, 16}, at::kDouble) * 3, w = at::randn({16}, at::kDouble);
  const double eps = 1e-5;
  const at::Tensor want = x / (x.pow(2).mean(-1, true) + eps).sqrt() * w;
  CHECK(max_abs_diff(kernels::rms_norm(x.to(at::kFloat), w.to(at::kFloat), eps).to(at::kDouble), want) < 1e-5);
  // bf16 input: float32 statistics, the normalized value rounded to bf16 before the scale.
  const at::Tensor xb = x.to(at::kBFloat16);
  const at::Tensor x32 = xb.to(at::kDouble);
  const at::Tensor want_b = (x32 / (x32.pow(2).mean(-1, true) + eps).sqrt()).to(at::kBFloat16).to(at::kDouble) * w;
  // Within one bf16 rounding of the normalized value (the float32 and double statistics may round
  // a value on a bf16 boundary apart).
  const at::Tensor got_b = kernels::rms_norm(xb, w.to(at::kFloat), eps).to(at::kDouble);
  CHECK(((got_b - want_b).abs() <= want_b.abs() / 128 + 1e-5).all().item<bool>());
}

TEST_CASE("llama gqa: 2 key/value heads for 4 query heads equal 4 heads whose key/value weights repeat each") {
  const ModelConfig gqa = tiny_llama(2), mha = tiny_llama(4);
  PlainOps a = random_ops(gqa);
  PlainOps b = a;  // the same weights, with k and v widened to 4 heads: head i takes head i / 2
  for (int64_t l = 0; l < gqa.n_layer; ++l)
    for (const char* kv : {"k", "v"}) {
      const std::string name = "h." + std::to_string(l) + ".attn." + kv + ".weight";
      b.params[name] = a.params.at(name).repeat_interleave(2, 1);  // (C, 2, D) -> (C, 4, D)
    }
  at::manual_seed(4);
  const at::Tensor idx = at::randint(0, gqa.vocab_size, {2, 12}, at::kLong);
  const at::Tensor targets = at::randint(0, gqa.vocab_size, {2, 12}, at::kLong);
  const double loss_gqa = Llama(gqa).loss(idx, targets, a, false).item<double>();
  const double loss_mha = Llama(mha).loss(idx, targets, b, false).item<double>();
  CHECK(std::abs(loss_gqa - loss_mha) < 1e-5 * std::abs(loss_mha));
  // A different pairing (head i with i % 2) would not match: the check can fail.
  PlainOps c = a;
  for (int64_t l = 0; l < gqa.n_layer; ++l)
    for (const char* kv : {"k", "v"}) {
      const std::string name = "h." + std::to_string(l) + ".attn." + kv + ".weight";
      c.params[name] = a.params.at(name).repeat({1, 2, 1});
    }
  CHECK(std::abs(Llama(mha).loss(idx, targets, c, false).item<double>() - loss_mha) > 1e-4);
}

TEST_CASE("llama decoding: a key/value cache of n_kv_head heads gives the whole forward's logits") {
  const ModelConfig m = tiny_llama(2);
  PlainOps ops = random_ops(m);
  const Llama model(m);
  at::manual_seed(5);
  const at::Tensor idx = at::randint(0, m.vocab_size, {2, 10}, at::kLong);
  KvCache cache;
  at::Tensor last = model.next_token_logits(idx.narrow(1, 0, 6), ops, &cache);
  for (int64_t t = 6; t < 10; ++t) last = model.next_token_logits(idx.narrow(1, t, 1), ops, &cache);
  CHECK(cache.keys[0].size(2) == 2);  // the cache holds the key/value heads only
  CHECK(cache.length == 10);
  CHECK(max_abs_diff(last, model.next_token_logits(idx, ops, nullptr)) < 1e-4);
}

TEST_CASE("llama table: names, shapes and logical axes, no lm_head when tied, an untied one after the stack only") {
  ModelConfig m = tiny_llama(2);
  const auto untied = param_table(m, 48);
  auto find = [](const std::vector<ParamInfo>& t, const std::string& name) -> const ParamInfo* {
    for (const auto& p : t)
      if (p.name == name) return &p;
    return nullptr;
  };
  REQUIRE(find(untied, "h.1.attn.k.weight"));
  CHECK(find(untied, "h.1.attn.k.weight")->shape == std::vector<int64_t>{32, 2, 8});
  CHECK(find(untied, "h.1.attn.q.weight")->logical == std::vector<std::string>{"embed", "heads", "kv"});
  CHECK(find(untied, "h.0.attn.o.weight")->input_dims == 2);
  CHECK(find(untied, "h.0.mlp.down.weight")->shape == std::vector<int64_t>{48, 32});
  const ParamInfo* head = find(untied, "lm_head");
  REQUIRE(head);
  CHECK(head->shape == std::vector<int64_t>{48, 32});
  CHECK((head->after_stack && !head->before_stack));
  CHECK((find(untied, "wte")->before_stack && !find(untied, "wte")->after_stack));
  CHECK(find(untied, "h.0.attn.q.bias") == nullptr);
  m.tie_embeddings = true;
  const auto tied = param_table(m, 48);
  CHECK(find(tied, "lm_head") == nullptr);
  CHECK((find(tied, "wte")->before_stack && find(tied, "wte")->after_stack));
  // 2 x (2 norms C + q C^2 + k, v 2 x C x 16 + o C^2 + 3 x C x 48) + ln_f C + wte and lm_head 40 x C
  CHECK(num_params(m) == 2 * (2 * 32 + 32 * 32 + 2 * 32 * 16 + 32 * 32 + 3 * 32 * 48) + 32 + 40 * 32);
}

namespace {
ModelConfig tiny_moe(int64_t shared) {
  ModelConfig m = tiny_llama(2);
  m.moe.num_experts = 4, m.moe.num_experts_per_tok = 2, m.moe.moe_intermediate_size = 24;
  m.moe.shared_expert_intermediate_size = shared;
  return m;
}

// One token's output of the sparse MLP, expert by expert, from the formulas (double precision).
at::Tensor sparse_mlp_one_token(const PlainOps& ops, const ModelConfig& m, const at::Tensor& x, int64_t layer) {
  const std::string p = "h." + std::to_string(layer) + ".moe";
  const at::Tensor probs = at::softmax(at::matmul(x, ops.params.at(p + ".router.weight").to(at::kDouble)), -1);
  std::vector<int64_t> order(static_cast<size_t>(m.moe.num_experts));
  for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int64_t>(e);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return probs[a].item<double>() > probs[b].item<double>(); });
  double total = 0;
  for (int64_t j = 0; j < m.moe.num_experts_per_tok; ++j) total += probs[order[static_cast<size_t>(j)]].item<double>();
  at::Tensor y = at::zeros({m.n_embd}, at::kDouble);
  auto swiglu_of = [&](const at::Tensor& g, const at::Tensor& u, const at::Tensor& d) {
    return at::matmul(at::silu(at::matmul(x, g)) * at::matmul(x, u), d);
  };
  for (int64_t j = 0; j < m.moe.num_experts_per_tok; ++j) {
    const int64_t e = order[static_cast<size_t>(j)];
    const double w = probs[e].item<double>() / (m.moe.norm_topk_prob ? total : 1.0);
    y += w * swiglu_of(ops.params.at(p + ".experts.gate")[e].to(at::kDouble),
                       ops.params.at(p + ".experts.up")[e].to(at::kDouble),
                       ops.params.at(p + ".experts.down")[e].to(at::kDouble));
  }
  if (m.moe.shared_expert_intermediate_size > 0) {
    const double open = at::sigmoid(at::matmul(x, ops.params.at(p + ".shared_gate.weight").to(at::kDouble)))[0].item<double>();
    y += open * swiglu_of(ops.params.at(p + ".shared.gate.weight").to(at::kDouble),
                          ops.params.at(p + ".shared.up.weight").to(at::kDouble),
                          ops.params.at(p + ".shared.down.weight").to(at::kDouble));
  }
  return y;
}
}  // namespace

TEST_CASE("llama moe: the sparse MLP equals each token's top-k SwiGLU experts mixed by its routing weights") {
  for (const int64_t shared : {int64_t{0}, int64_t{20}}) {
    for (const bool normalize : {false, true}) {
      CAPTURE(shared);
      CAPTURE(normalize);
      ModelConfig m = tiny_moe(shared);
      m.moe.norm_topk_prob = normalize;
      PlainOps ops = random_ops(m);
      at::manual_seed(5);
      const at::Tensor x = at::randn({2, 5, m.n_embd});
      const at::Tensor got = sparse_mlp(m, x, 1, ops);
      REQUIRE(got.sizes() == x.sizes());
      double worst = 0;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t t = 0; t < 5; ++t)
          worst = std::max(worst, max_abs_diff(got[b][t].to(at::kDouble),
                                               sparse_mlp_one_token(ops, m, x[b][t].to(at::kDouble), 1)));
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("llama moe: the router breaks ties toward the lower expert index and renormalises on request") {
  // Token 0: experts 1, 2 and 3 tie; token 1: all four tie.
  const at::Tensor logits = at::tensor(std::vector<float>{0, 2, 2, 2, 1, 1, 1, 1}).view({2, 4});
  const Routing r = route_tokens(logits, 2, /*normalize=*/false);
  CHECK(r.choice[0][0].item<int64_t>() == 1);
  CHECK(r.choice[0][1].item<int64_t>() == 2);
  CHECK(r.choice[1][0].item<int64_t>() == 0);
  CHECK(r.choice[1][1].item<int64_t>() == 1);
  CHECK(std::abs(r.weights[1][0].item<float>() - 0.25f) < 1e-7);
  const Routing n = route_tokens(logits, 2, /*normalize=*/true);
  CHECK((n.weights.sum(-1) - 1).abs().max().item<float>() < 1e-6);
}

TEST_CASE("llama moe: the balancing loss is transformers' formula over every layer and token, its gradient exact") {
  // transformers' load_balancing_loss_func, written out: rows of all layers concatenated, the
  // top-k one-hot mean (k, E) times the mean probability (E), summed, times E.
  const int64_t E = 4, k = 2, N = 6;
  at::manual_seed(9);
  const std::vector<at::Tensor> logits{at::randn({N, E}), at::randn({N, E})};
  at::Tensor concat = at::cat(logits, 0).to(at::kDouble);
  const at::Tensor probs = at::softmax(concat, -1);
  const at::Tensor top = std::get<1>(at::topk(probs, k, -1));
  const at::Tensor mask = at::one_hot(top, E).to(at::kDouble);  // (2N, k, E)
  const double expected = (mask.mean(0) * probs.mean(0).unsqueeze(0)).sum().item<double>() * E;

  RoutingTally tally(3, E, c10::Device(c10::kCPU));  // layers 0 and 2 sparse, 1 dense
  std::vector<at::Tensor> leaves;
  for (size_t l = 0; l < 2; ++l) {
    leaves.push_back(logits[l].clone().requires_grad_(true));
    const Routing r = route_tokens(leaves.back(), k, false);
    tally.record(l == 0 ? 0 : 2, r.probs, r.choice);
  }
  StepRouting step({0, 2}, N, /*coef=*/1.0, /*gradient_scale=*/1.0);
  step.settle(tally);
  CHECK(std::abs(step.aux_loss() - expected) < 1e-6);  // our probabilities are float32
  // Its gradient through the probabilities (the routing's counts held fixed) against autograd's.
  at::Tensor direct = at::zeros({}, at::kDouble);
  for (size_t l = 0; l < 2; ++l) {
    const Routing r = route_tokens(leaves[l], k, false);
    direct = direct + (r.probs.sum(0).to(at::kDouble) * step.prob_sum_gradient().to(at::kDouble)).sum();
  }
  CHECK(std::abs(direct.item<double>() - expected) < 1e-6);  // linear in the probability sums
  // The loads: tokens per expert over the layer's (token, slot) rows.
  const auto loads = step.loads();
  REQUIRE(loads.size() == 2);
  CHECK(loads[1].layer == 2);
  const at::Tensor counts = at::bincount(std::get<1>(at::topk(at::softmax(logits[1], -1), k, -1)).reshape({-1}), {}, E);
  CHECK(loads[1].max == counts.max().item<double>());
  CHECK(loads[1].min == counts.min().item<double>());
}
