// Muon's pieces: which parameters take it, the nn.Linear view of our input-major weights, owners
// spread by cost, torch's learning-rate adjustment, the sharded optimizer on one process equal to
// the whole-matrix update (host and device paths), the checkpoint's arrays, and why the whole
// matrix matters: a per-shard orthogonalisation is another update; the memory estimate counts one
// momentum buffer per Muon matrix where AdamW keeps two.
#include <algorithm>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "ckpt/checkpoint_format.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "inspect/memory_estimate.h"
#include "model/params.h"
#include "muon/muon.h"
#include "muon/muon_matrices.h"
#include "muon/muon_update.h"
#include "parallel/layout.h"
#include "parallel/sharded_model.h"

#include "doctest_check.h"

using namespace spmd;

namespace {
// The tiny model of the integration tests with Muon, on `mesh` (a YAML flow map) and `rules`.
Config muon_test_config(const std::string& mesh, const std::string& rules, const std::vector<std::string>& more = {}) {
  std::vector<std::string> overrides{"train.optimizer=muon", "train.muon.ns_dtype=float32"};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return parse_config("mesh: " + mesh + "\nsharding_rules: " + rules +
                          "\nmodel: {vocab_size: 72, block_size: 16, n_layer: 2, n_head: 8, n_embd: 32}\n"
                          "data: {train: t.bin, batch_size: 8}\n",
                      "muon.yaml", overrides);
}
const char* kMuonOneProcessRules =
    "[[batch, data], [vocab, null], [heads, null], [mlp, null], [embed, null], [seq, null], [kv, null]]";

std::set<std::string> muon_names(const std::vector<ParamInfo>& table) {
  std::set<std::string> names;
  for (const auto& p : table)
    if (takes_muon(p)) names.insert(p.name);
  return names;
}

double relative_frobenius(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / b.to(at::kDouble).norm().item<double>();
}
}  // namespace

TEST_CASE("muon: the blocks' matrices take Muon, and embeddings, head, norms and biases AdamW") {
  ModelConfig gpt2;
  gpt2.n_layer = 2;
  std::set<std::string> want;
  for (const char* l : {"0", "1"})
    for (const char* w : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"})
      want.insert(std::string("h.") + l + "." + w + ".weight");
  CHECK(muon_names(param_table(gpt2, 128)) == want);

  ModelConfig llama;
  llama.arch = ModelArch::kLlama;
  llama.n_layer = 1, llama.n_kv_head = 2, llama.intermediate_size = 256, llama.bias = false;
  llama.tie_embeddings = false;
  CHECK(muon_names(param_table(llama, 128)) ==
        std::set<std::string>{"h.0.attn.q.weight", "h.0.attn.k.weight", "h.0.attn.v.weight", "h.0.attn.o.weight",
                              "h.0.mlp.gate.weight", "h.0.mlp.up.weight", "h.0.mlp.down.weight"});
  TrainConfig adamw;  // train.optimizer adamw: nothing takes Muon
  for (const auto& p : param_table(gpt2, 128)) CHECK_FALSE(takes_muon(adamw, p));
}

TEST_CASE("muon: a stored weight's nn.Linear view is (out_features, in_features) and goes back exactly") {
  const int64_t C = 4, H = 2, D = 3;
  // c_attn [C, 3, H, D] (one input dim): the Linear (3 H D, C); x @ W == F.linear(x, view).
  const at::Tensor c_attn = at::randn({C, 3, H, D});
  const at::Tensor linear = as_linear(c_attn, 1);
  CHECK(linear.sizes() == at::IntArrayRef({3 * H * D, C}));
  CHECK(linear.is_contiguous());
  const at::Tensor x = at::randn({5, C});
  CHECK(at::allclose(at::matmul(x, c_attn.reshape({C, 3 * H * D})), at::linear(x, linear)));
  CHECK(at::equal(from_linear(linear, c_attn.sizes()), c_attn));
  // c_proj [H, D, C] (two input dims): the Linear (C, H D).
  const at::Tensor c_proj = at::randn({H, D, C});
  const at::Tensor proj = as_linear(c_proj, 2);
  CHECK(proj.sizes() == at::IntArrayRef({C, H * D}));
  CHECK(at::equal(proj, c_proj.reshape({H * D, C}).t()));
  CHECK(at::equal(from_linear(proj, c_proj.sizes()), c_proj));
}

TEST_CASE("muon: torch's learning-rate adjustment by the matrix's shape") {
  CHECK(muon_adjusted_lr(0.02, MuonAdjustLr::kOriginal, 96, 32) == doctest::Approx(0.02 * std::sqrt(3.0)));
  CHECK(muon_adjusted_lr(0.02, MuonAdjustLr::kOriginal, 32, 96) == 0.02);  // wide: max(1, rows / cols) = 1
  CHECK(muon_adjusted_lr(0.02, MuonAdjustLr::kMatchRmsAdamW, 32, 96) == doctest::Approx(0.2 * 0.02 * std::sqrt(96.0)));
}

TEST_CASE("muon: owners spread the Newton-Schulz work by cost, the same plan on every rank of a stage") {
  const Config config = muon_test_config("{shape: [4], axes: [fsdp]}",
                                         "[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], "
                                         "[seq, null], [kv, null]]");
  const ModelLayout layout = plan_layout(config);
  for (const int64_t group : {1, 2, 4, 8}) {
    CAPTURE(group);
    const auto plan = plan_muon_matrices(layout, 0, group, 5);
    REQUIRE(plan.size() == 8);  // 2 blocks x (c_attn, c_proj, c_fc, mlp.c_proj)
    std::vector<double> load(static_cast<size_t>(group), 0.0);
    double total = 0, largest = 0;
    for (const MuonMatrix& m : plan) {
      REQUIRE((m.owner >= 0 && m.owner < group));
      load[static_cast<size_t>(m.owner)] += m.cost;
      total += m.cost;
      largest = std::max(largest, m.cost);
    }
    // Largest first to the least loaded: no member carries more than its share plus one matrix.
    CHECK(*std::max_element(load.begin(), load.end()) <= total / static_cast<double>(group) + largest);
    if (group == 8) CHECK(std::count(load.begin(), load.end(), 0.0) == 0);  // one matrix each
    const auto other = plan_muon_matrices(layout, 3, group, 5);
    for (size_t k = 0; k < plan.size(); ++k) CHECK(other[k].owner == plan[k].owner);
  }
  // A pipeline stage plans its own blocks only.
  const Config staged = muon_test_config("{shape: [2], axes: [stage]}",
                                         "[[batch, null], [layers, stage], [vocab, null], [heads, null], [mlp, null], "
                                         "[embed, null], [seq, null], [kv, null]]",
                                         {"train.microbatches=2"});
  const ModelLayout staged_layout = plan_layout(staged);
  for (const int64_t rank : {0, 1})
    for (const MuonMatrix& m : plan_muon_matrices(staged_layout, rank, 1, 5))
      CHECK(staged_layout.params[m.param].info.layer == rank);
}

TEST_CASE("muon: the memory estimate keeps one buffer per Muon matrix, AdamW's two for the rest") {
  const std::string fsdp_rules =
      "[[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], [mlp, null], [seq, null], [kv, null]]";
  for (const auto& [mesh, rules] : std::vector<std::pair<std::string, std::string>>{
           {"{shape: [1], axes: [data]}", kMuonOneProcessRules}, {"{shape: [4], axes: [fsdp]}", fsdp_rules}}) {
    CAPTURE(mesh);
    const Config config = muon_test_config(mesh, rules);
    const ModelLayout layout = plan_layout(config);
    int64_t matrix_bytes = 0;  // this device's shards of the Muon matrices
    for (const auto& p : layout.params)
      if (takes_muon(p.info)) matrix_bytes += p.sharding.shard_numel() * 4;
    REQUIRE(matrix_bytes > 0);
    const MemoryEstimate adamw = estimate_memory(layout, 8, 1, 0, PipelineSchedule::kOneFOneB, Remat::kNone);
    const MemoryEstimate muon =
        estimate_memory(layout, 8, 1, 0, PipelineSchedule::kOneFOneB, Remat::kNone, Optimizer::kMuon);
    CHECK(adamw.optimizer == 2 * adamw.params);
    CHECK(adamw.muon_momentum == 0);
    CHECK(muon.muon_momentum == matrix_bytes);
    CHECK(adamw.optimizer - muon.optimizer == matrix_bytes);  // one buffer fewer per Muon matrix
    CHECK(muon.params == adamw.params);
    CHECK(muon.total() == adamw.total() - matrix_bytes);
    CHECK(estimate_stages(layout, config)[0].optimizer == muon.optimizer);  // the config's optimizer
  }
  ModelConfig gpt2;
  gpt2.n_layer = 2, gpt2.n_embd = 32, gpt2.n_head = 8, gpt2.vocab_size = 72, gpt2.block_size = 16;
  int64_t whole = 0;
  for (const auto& p : param_table(gpt2, gpt2.vocab_size))
    if (takes_muon(p)) whole += 4 * std::accumulate(p.shape.begin(), p.shape.end(), int64_t{1}, std::multiplies<>());
  const MemoryEstimate one = estimate_unsharded_memory(gpt2, 8);
  const MemoryEstimate one_muon = estimate_unsharded_memory(gpt2, 8, 1, Remat::kNone, false, Optimizer::kMuon);
  CHECK(one.optimizer - one_muon.optimizer == whole);
}

TEST_CASE("muon: the sharded optimizer on one process is the whole-matrix update, host and device paths") {
  const Config config = muon_test_config("{shape: [1], axes: [data]}", kMuonOneProcessRules);
  auto build = [&](Communicator& comm) { return std::make_unique<ShardedModel>(plan_layout(config), comm, 7); };
  Communicator comm_a(plan_layout(config).mesh), comm_b(plan_layout(config).mesh);
  auto a = build(comm_a), b = build(comm_b);
  Muon host(*a, config.train.muon), device(*b, config.train.muon);
  REQUIRE(host.matrices().size() == 8);
  // The reference: muon_matrix_step on each matrix's nn.Linear view.
  std::vector<at::Tensor> ref_param, ref_buf;
  for (const MuonMatrix& m : host.matrices()) {
    ref_param.push_back(as_linear(a->params()[m.param].detach(), a->layout().params[m.param].info.input_dims));
    ref_buf.push_back(at::zeros_like(ref_param.back()));
  }
  std::vector<at::Tensor> untouched;
  for (const auto& p : a->params()) untouched.push_back(p.detach().clone());
  const double lr = 0.02, scale = 0.5;
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < a->params().size(); ++i) {
      const at::Tensor g = at::sin(at::arange(a->params()[i].numel(), at::kFloat) * (0.37 * (step + 1)) + i)
                               .reshape(a->params()[i].sizes());
      a->params()[i].mutable_grad() = g.clone();
      b->params()[i].mutable_grad() = g.clone();
    }
    host.step(lr, scale);
    device.step_on_device(lr, at::full({}, scale, at::kDouble), at::ones({}, at::kBool));
    for (size_t k = 0; k < host.matrices().size(); ++k) {
      const MuonMatrix& m = host.matrices()[k];
      const int64_t input_dims = a->layout().params[m.param].info.input_dims;
      const at::Tensor g = as_linear(a->params()[m.param].grad() * scale, input_dims);
      muon_matrix_step(ref_param[k], g, ref_buf[k], lr, config.train.muon);
      CAPTURE(a->layout().params[m.param].info.name);
      CHECK(at::equal(as_linear(a->params()[m.param].detach(), input_dims), ref_param[k]));
      CHECK(at::equal(as_linear(host.momentum()[m.param], input_dims), ref_buf[k]));
      CHECK(at::equal(b->params()[m.param].detach(), a->params()[m.param].detach()));
      CHECK(at::equal(device.momentum()[m.param], host.momentum()[m.param]));
    }
  }
  for (size_t i = 0; i < a->params().size(); ++i)  // AdamW's parameters are not Muon's to change
    if (!takes_muon(a->layout().params[i].info)) CHECK(at::equal(a->params()[i].detach(), untouched[i]));
  // apply false (a non-finite step on the device): nothing moves.
  const at::Tensor p0 = b->params()[host.matrices()[0].param].detach().clone();
  const at::Tensor m0 = device.momentum()[host.matrices()[0].param].clone();
  device.step_on_device(lr, at::full({}, scale, at::kDouble), at::zeros({}, at::kBool));
  CHECK(at::equal(b->params()[host.matrices()[0].param].detach(), p0));
  CHECK(at::equal(device.momentum()[host.matrices()[0].param], m0));
  CHECK(host.state_bytes() == 4 * (2 * (32 * 96 + 32 * 32 + 32 * 128 + 128 * 32)));
}

TEST_CASE("muon: a checkpoint holds a Muon matrix's momentum in place of AdamW's moments") {
  ModelConfig gpt2;
  gpt2.n_layer = 1;
  TrainConfig muon, adamw;
  muon.optimizer = Optimizer::kMuon;
  for (const auto& p : param_table(gpt2, 128)) {
    CAPTURE(p.name);
    const std::vector<std::string> adamw_kinds{"param", "exp_avg", "exp_avg_sq"};
    CHECK(checkpoint_array_kinds(adamw, p) == adamw_kinds);
    const std::vector<std::string> muon_kinds{"param", "momentum"};
    CHECK(checkpoint_array_kinds(muon, p) == (takes_muon(p) ? muon_kinds : adamw_kinds));
  }
}

TEST_CASE("muon: orthogonalising each shard alone is another update, and the gathered whole the same bits") {
  // c_fc's nn.Linear (4C, C) split as tensor parallelism on `mlp` splits it (rows), and as FSDP on
  // `embed` splits it (columns): per-shard Newton-Schulz moves the update by tens of percent,
  // far past what bf16 itself moves it (measured below): the whole matrix is the algorithm.
  at::manual_seed(3);
  const at::Tensor update = at::randn({128, 32});
  MuonConfig f32, bf16;
  f32.ns_dtype = MatmulDtype::kFloat32;
  const at::Tensor whole = newton_schulz(update, f32);
  const at::Tensor gathered = at::cat({update.narrow(0, 0, 64), update.narrow(0, 64, 64)}, 0);
  CHECK(at::equal(newton_schulz(gathered, f32), whole));
  const double bf16_vs_f32 = relative_frobenius(newton_schulz(update, bf16), whole);
  for (const int64_t dim : {0, 1}) {
    CAPTURE(dim);
    const int64_t half = update.size(dim) / 2;
    const at::Tensor per_shard = at::cat({newton_schulz(update.narrow(dim, 0, half), f32),
                                          newton_schulz(update.narrow(dim, half, half), f32)},
                                         dim);
    const double moved = relative_frobenius(per_shard, whole);
    MESSAGE("per-shard along dim " << dim << ": " << moved << " of the update; bf16 vs float32 " << bf16_vs_f32);
    CHECK(moved > 0.1);
    CHECK(moved > 5 * bf16_vs_f32);
  }
}
