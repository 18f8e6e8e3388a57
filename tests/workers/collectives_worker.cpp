// One rank of the collective-gradient test: runs every autograd-aware collective over real Gloo
// groups and compares values and gradients with the same function computed by autograd on one
// process. Prints "ok NAME" per check; exits 1 with the mismatch otherwise.
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>  // completes c10d::Backend: a Group of one is built here

#include "comm/collectives.h"
#include "comm/communicator.h"
#include "comm/launch_env.h"
#include "kernels/kernels.h"
#include "parallel/fsdp_ops.h"
#include "parallel/fsdp_prefetch.h"
#include "parallel/head_loss.h"
#include "util/error.h"
#include "util/guarded_main.h"

using namespace spmd;

namespace {
int failures = 0;

void expect_close(const std::string& what, const at::Tensor& got, const at::Tensor& want) {
  bool ok = got.sizes() == want.sizes() && at::allclose(got, want, 1e-5, 1e-6);
  if (ok) {
    fmt::print("ok {}\n", what);
  } else {
    ++failures;
    fmt::print("MISMATCH {}: got {} want {}\n", what, got.flatten().slice(0, 0, 8).toString(),
               want.flatten().slice(0, 0, 8).toString());
    std::cout << "got:\n" << got << "\nwant:\n" << want << std::endl;
  }
}

// Deterministic per-member data, known to every rank (so each can build the reference).
at::Tensor data_for(int member, std::vector<int64_t> shape, double salt) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return (at::arange(n, at::kDouble).to(at::kFloat) * 0.37 + member * 1.3 + salt).sin().reshape(shape);
}

void expect_true(const std::string& what, bool ok) {
  if (ok) {
    fmt::print("ok {}\n", what);
  } else {
    ++failures;
    fmt::print("MISMATCH {}\n", what);
  }
}

at::Tensor leaf(const at::Tensor& t) { return t.clone().set_requires_grad(true); }

void check_group(const Group& g, const std::string& label) {
  const int n = g.size(), r = g.rank();
  // copy_to_group: forward identity, backward all-reduce. Reference: sum_r <x, w_r>.
  {
    at::Tensor x = leaf(data_for(0, {3, 2}, 0.1));
    at::Tensor y = copy_to_group(x, g);
    (y * data_for(r, {3, 2}, 0.2)).sum().backward();
    at::Tensor xr = leaf(data_for(0, {3, 2}, 0.1));
    at::Tensor total = at::zeros({}, at::kFloat);
    for (int m = 0; m < n; ++m) total = total + (xr * data_for(m, {3, 2}, 0.2)).sum();
    total.backward();
    expect_close(label + " copy_to_group forward", y.detach(), x.detach());
    expect_close(label + " copy_to_group grad", x.grad(), xr.grad());
  }
  // reduce_from_group: forward all-reduce, backward identity. Reference: <sum_m x_m, c>.
  {
    at::Tensor x = leaf(data_for(r, {4}, 0.3));
    at::Tensor y = reduce_from_group(x, g);
    at::Tensor c = data_for(0, {4}, 0.4);
    (y * c).sum().backward();
    std::vector<at::Tensor> xs;
    for (int m = 0; m < n; ++m) xs.push_back(leaf(data_for(m, {4}, 0.3)));
    at::Tensor ref = at::stack(xs).sum(0);
    (ref * c).sum().backward();
    expect_close(label + " reduce_from_group forward", y.detach(), ref.detach());
    expect_close(label + " reduce_from_group grad", x.grad(), xs[r].grad());
  }
  // gather_params_from_group (FSDP): forward all-gather, backward reduce-scatter.
  // Reference: sum_m <cat(x), W_m>, each member holding its own W_m.
  {
    at::Tensor x = leaf(data_for(r, {2, 3}, 0.5));
    at::Tensor y = gather_params_from_group(x, 0, g);
    (y * data_for(r, {2 * n, 3}, 0.6)).sum().backward();
    std::vector<at::Tensor> xs;
    for (int m = 0; m < n; ++m) xs.push_back(leaf(data_for(m, {2, 3}, 0.5)));
    at::Tensor all = at::cat(xs, 0);
    at::Tensor total = at::zeros({}, at::kFloat);
    for (int m = 0; m < n; ++m) total = total + (all * data_for(m, {2 * n, 3}, 0.6)).sum();
    total.backward();
    expect_close(label + " gather_params_from_group forward", y.detach(), all.detach());
    expect_close(label + " gather_params_from_group grad", x.grad(), xs[r].grad());
  }
  // gather_from_group: forward all-gather along dim 1, backward keep own chunk.
  // Reference: <cat(x), W> with W replicated (the computation after the gather is replicated).
  {
    at::Tensor x = leaf(data_for(r, {2, 3}, 0.7));
    at::Tensor y = gather_from_group(x, 1, g);
    at::Tensor w = data_for(0, {2, 3 * n}, 0.8);
    (y * w).sum().backward();
    std::vector<at::Tensor> xs;
    for (int m = 0; m < n; ++m) xs.push_back(leaf(data_for(m, {2, 3}, 0.7)));
    at::Tensor all = at::cat(xs, 1);
    (all * w).sum().backward();
    expect_close(label + " gather_from_group forward", y.detach(), all.detach());
    expect_close(label + " gather_from_group grad", x.grad(), xs[r].grad());
  }
  // scatter_to_group: forward own chunk, backward all-gather. Reference: sum_m <chunk_m(x), W_m>.
  {
    at::Tensor x = leaf(data_for(0, {2 * n, 2}, 0.9));
    at::Tensor y = scatter_to_group(x, 0, g);
    (y * data_for(r, {2, 2}, 1.0)).sum().backward();
    at::Tensor xr = leaf(data_for(0, {2 * n, 2}, 0.9));
    at::Tensor total = at::zeros({}, at::kFloat);
    for (int m = 0; m < n; ++m) total = total + (xr.chunk(n, 0)[m] * data_for(m, {2, 2}, 1.0)).sum();
    total.backward();
    expect_close(label + " scatter_to_group forward", y.detach(), xr.detach().chunk(n, 0)[r]);
    expect_close(label + " scatter_to_group grad", x.grad(), xr.grad());
  }
  // fsdp_linear: each member's own rows x_m times the weight gathered from the shards (dim 0 of a
  // (K, 2, 3) weight viewed as (K, 6)), plus a full bias. Reference: sum_m <x_m W + b, c_m>, with
  // float32 operands and with bfloat16 ones (model.matmul_dtype; reference: dense_product's).
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const std::string name = label + (dtype == at::kFloat ? " fsdp_linear" : " fsdp_linear bf16");
    const int64_t K = 2 * n;
    FsdpGathers gathers{{0, &g}};
    at::Tensor x = leaf(data_for(r, {4, K}, 1.2));
    at::Tensor shard = leaf(data_for(r, {2, 2, 3}, 1.3));
    at::Tensor bias = leaf(data_for(0, {6}, 1.4));
    std::vector<at::Tensor> params{shard};
    FsdpPrefetcher unit(params, {gathers}, {0});
    at::Tensor y = fsdp_linear(x, FsdpWeight{0, &unit, fsdp_unit_grad_handles(unit, 0)[0]}, false, bias, dtype);
    (y * data_for(r, {4, 6}, 1.5)).sum().backward();
    std::vector<at::Tensor> xs, shards;
    for (int m = 0; m < n; ++m) {
      xs.push_back(leaf(data_for(m, {4, K}, 1.2)));
      shards.push_back(leaf(data_for(m, {2, 2, 3}, 1.3)));
    }
    at::Tensor w = at::cat(shards, 0).reshape({K, 6});
    at::Tensor b = leaf(data_for(0, {6}, 1.4));
    at::Tensor total = at::zeros({}, at::kFloat);
    for (int m = 0; m < n; ++m) total = total + (kernels::dense_product(xs[m], w, b, dtype) * data_for(m, {4, 6}, 1.5)).sum();
    total.backward();
    expect_close(name + " forward", y.detach(), kernels::dense_product(xs[r], w, b, dtype).detach());
    expect_close(name + " grad x", x.grad(), xs[r].grad());
    expect_close(name + " grad shard", shard.grad(), shards[r].grad());
    // The bias is replicated: each member's gradient is its own part of the sum.
    // With bf16 operands the output is bf16, so is its gradient: the bias's sums bf16 rows.
    expect_close(name + " grad bias", bias.grad(), data_for(r, {4, 6}, 1.5).to(dtype).sum(0).to(at::kFloat));
  }
  // fsdp_linear transposed (the tied LM head): the shards are columns (dim 1) of a (V, K) table.
  {
    const int64_t K = 3 * n;
    FsdpGathers gathers{{1, &g}};
    at::Tensor x = leaf(data_for(r, {4, K}, 1.6));
    at::Tensor shard = leaf(data_for(r, {5, 3}, 1.7));
    std::vector<at::Tensor> params{shard};
    FsdpPrefetcher unit(params, {gathers}, {0});
    at::Tensor y = fsdp_linear(x, FsdpWeight{0, &unit, fsdp_unit_grad_handles(unit, 0)[0]}, true, at::Tensor());
    (y * data_for(r, {4, 5}, 1.8)).sum().backward();
    std::vector<at::Tensor> xs, shards;
    for (int m = 0; m < n; ++m) {
      xs.push_back(leaf(data_for(m, {4, K}, 1.6)));
      shards.push_back(leaf(data_for(m, {5, 3}, 1.7)));
    }
    at::Tensor table = at::cat(shards, 1);
    at::Tensor total = at::zeros({}, at::kFloat);
    for (int m = 0; m < n; ++m) total = total + (at::mm(xs[m], table.t()) * data_for(m, {4, 5}, 1.8)).sum();
    total.backward();
    expect_close(label + " fsdp_linear transposed forward", y.detach(), at::mm(xs[r], table.t()).detach());
    expect_close(label + " fsdp_linear transposed grad x", x.grad(), xs[r].grad());
    expect_close(label + " fsdp_linear transposed grad shard", shard.grad(), shards[r].grad());
  }
  // fsdp_layer_norm: a scale gathered from the shards, a full bias.
  {
    const int64_t C = 2 * n;
    FsdpGathers gathers{{0, &g}};
    at::Tensor x = leaf(data_for(r, {3, C}, 1.9) * 2.0);
    at::Tensor shard = leaf(data_for(r, {2}, 2.0) + 1.0);
    at::Tensor bias = leaf(data_for(0, {C}, 2.1));
    std::vector<at::Tensor> params{shard};
    FsdpPrefetcher unit(params, {gathers}, {0});
    at::Tensor y = fsdp_layer_norm(x, FsdpWeight{0, &unit, fsdp_unit_grad_handles(unit, 0)[0]}, bias, 1e-5);
    (y * data_for(r, {3, C}, 2.2)).sum().backward();
    std::vector<at::Tensor> xs, shards;
    for (int m = 0; m < n; ++m) {
      xs.push_back(leaf(data_for(m, {3, C}, 1.9) * 2.0));
      shards.push_back(leaf(data_for(m, {2}, 2.0) + 1.0));
    }
    at::Tensor w = at::cat(shards, 0);
    at::Tensor b = leaf(data_for(0, {C}, 2.1));
    at::Tensor total = at::zeros({}, at::kFloat);
    for (int m = 0; m < n; ++m) total = total + (at::layer_norm(xs[m], {C}, w, b, 1e-5) * data_for(m, {3, C}, 2.2)).sum();
    total.backward();
    expect_close(label + " fsdp_layer_norm forward", y.detach(), at::layer_norm(xs[r], {C}, w, b, 1e-5).detach());
    expect_close(label + " fsdp_layer_norm grad x", x.grad(), xs[r].grad());
    expect_close(label + " fsdp_layer_norm grad shard", shard.grad(), shards[r].grad());
    expect_close(label + " fsdp_layer_norm grad bias", bias.grad(), data_for(r, {3, C}, 2.2).sum(0));
  }
  // FsdpPrefetcher: weights 0 and 1 (gathered along different dims) form one unit, 2 and 3 one
  // each. What it serves equals the plain per-weight gather, whether its recorded order of units
  // holds (then every unit after a pass's first is served by a gather started one unit earlier)
  // or changes; one all-gather per unit; the unit's reduce-scatter equals the per-weight ones.
  {
    using Pass = FsdpPrefetcher::Pass;
    const FsdpGathers rows{{0, &g}}, columns{{1, &g}};
    std::vector<at::Tensor> shards;
    for (int k = 0; k < 4; ++k) shards.push_back(data_for(r, {2, 3}, 3.0 + k));
    const std::vector<FsdpGathers> gathers{rows, columns, rows, rows};
    FsdpPrefetcher prefetcher(shards, gathers, {7, 7, 8, 9});
    std::vector<at::Tensor> expected;
    for (size_t k = 0; k < shards.size(); ++k) expected.push_back(fsdp_gather(shards[k], gathers[k]));
    auto pass = [&](const std::vector<size_t>& order) {
      prefetcher.begin_forward();
      bool same = true;
      for (size_t k : order) same = at::equal(prefetcher.gather(k, Pass::kForward), expected[k]) && same;
      return same;
    };
    const int64_t all_gathers_before = collective_counts().all_gathers;
    const bool recorded = pass({0, 1, 2, 3});
    const int64_t per_pass = collective_counts().all_gathers - all_gathers_before;
    const bool repeated = pass({1, 0, 2, 3}) && pass({0, 1, 2, 3});
    const int64_t served_ahead = prefetcher.prefetched_gathers();
    const bool changed = pass({0, 3, 2, 1}) && pass({0, 1});
    prefetcher.drain();
    expect_true(label + " fsdp prefetch values", recorded && repeated && changed);
    expect_true(label + " fsdp unit gathers: " + std::to_string(per_pass) + " all-gathers for 3 units",
                per_pass == 3 && prefetcher.unit_gathers() == 3 * 3 + 4 + 1);
    expect_true(label + " fsdp prefetch served ahead " + std::to_string(served_ahead) + " of 4", served_ahead == 4);
    std::vector<at::Tensor> grads{data_for(r, {2 * n, 3}, 4.0), at::Tensor()};
    const std::vector<at::Tensor> dshards = prefetcher.reduce_scatter(prefetcher.unit_of(0), grads);
    expect_close(label + " fsdp unit reduce-scatter", dshards[0], fsdp_reduce_scatter(grads[0], rows));
    expect_true(label + " fsdp unit reduce-scatter leaves out a weight without a gradient", !dshards[1].defined());
  }
  // head_cross_entropy vocab-parallel: member m holds rows [m V_local, (m + 1) V_local) of the
  // table, the last shard ending in padding; x is replicated (copy_to_group sums its gradient).
  // Against at::cross_entropy over the full logits, one row not scored, in chunks of 2 rows.
  {
    const int64_t N = 5, C = 4, V_local = 3, V = V_local * n, valid = V - 1;
    at::Tensor x = leaf(data_for(0, {N, C}, 1.0) * 2.0);
    at::Tensor full = data_for(0, {V, C}, 1.1) * 1.5;
    at::Tensor mine = leaf(full.narrow(0, r * V_local, V_local));
    at::Tensor targets = at::remainder(at::arange(N, at::kLong) * 7, valid);
    targets[3].fill_(-1);
    HeadShard head;
    head.vocab_offset = r * V_local, head.valid_vocab = valid, head.vocab_group = &g, head.chunk_rows = 2;
    at::Tensor loss = head_cross_entropy(copy_to_group(x, g), mine, targets, head);
    loss.backward();
    at::Tensor ref_x = leaf(x.detach()), ref_table = leaf(full);
    at::Tensor ref = at::cross_entropy_loss(at::mm(ref_x, ref_table.t()).narrow(1, 0, valid), targets, {},
                                            at::Reduction::Sum, -1) / N;
    ref.backward();
    expect_close(label + " head_cross_entropy vocab-parallel forward", loss.detach(), ref.detach());
    expect_close(label + " head_cross_entropy vocab-parallel grad x", x.grad(), ref_x.grad());
    expect_close(label + " head_cross_entropy vocab-parallel grad table", mine.grad(),
                 ref_table.grad().narrow(0, r * V_local, V_local));
    at::Tensor rows = head_token_losses(x, mine, targets, head);
    expect_close(label + " head_token_losses vocab-parallel",
                 rows, at::cross_entropy_loss(at::mm(x.detach(), full.t()).narrow(1, 0, valid), targets, {},
                                              at::Reduction::None, -1));
  }
  // head_cross_entropy under FSDP: the table's embed dim sharded over the group, each member its
  // own rows, the whole vocabulary on every member. Reference: sum_m loss_m, the shard's gradient
  // its columns of the table's.
  {
    const Group self;
    const int64_t N = 6, V = 7, valid = 6, C = 2 * n;
    std::vector<at::Tensor> xs, shards;
    for (int m = 0; m < n; ++m) {
      xs.push_back(leaf(data_for(m, {N, C}, 1.2) * 2.0));
      shards.push_back(leaf(data_for(m, {V, 2}, 1.3)));
    }
    at::Tensor targets = at::remainder(at::arange(N, at::kLong) * 5 + r, valid);
    HeadShard head;
    head.valid_vocab = valid, head.vocab_group = &self, head.gathers = {{1, &g}}, head.chunk_rows = 4;
    at::Tensor x = leaf(xs[r].detach()), shard = leaf(shards[r].detach());
    at::Tensor loss = head_cross_entropy(x, shard, targets, head);
    loss.backward();
    at::Tensor table = at::cat(shards, 1);
    at::Tensor total = at::zeros({}, at::kFloat);
    at::Tensor mine_ref;
    for (int m = 0; m < n; ++m) {
      at::Tensor t = at::remainder(at::arange(N, at::kLong) * 5 + m, valid);
      at::Tensor l = at::cross_entropy_loss(at::mm(xs[m], table.t()).narrow(1, 0, valid), t);
      if (m == r) mine_ref = l.detach();
      total = total + l;
    }
    total.backward();
    expect_close(label + " head_cross_entropy fsdp forward", loss.detach(), mine_ref);
    expect_close(label + " head_cross_entropy fsdp grad x", x.grad(), xs[r].grad());
    expect_close(label + " head_cross_entropy fsdp grad shard", shard.grad(), shards[r].grad());
  }
}
}  // namespace

int main() {
  return guarded_main("collectives_worker", [] {
    const auto launched = detect_launch_env(current_environment());
    if (!launched) throw UsageError("run with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set");
    RendezvousInfo info;
    info.rank = launched->rendezvous.rank, info.world_size = launched->rendezvous.world_size;
    info.master_addr = launched->rendezvous.master_addr, info.master_port = launched->rendezvous.master_port;
    info.timeout_s = 60;
    Mesh mesh({2, info.world_size / 2}, {"data", "model"});
    Communicator comm(info, mesh);
    comm.create_group({"model"});
    comm.create_group({"data", "model"});
    check_group(comm.along({"model"}), "model-line");
    check_group(comm.along({"data", "model"}), "world");
    return failures == 0 ? 0 : 1;
  });
}
