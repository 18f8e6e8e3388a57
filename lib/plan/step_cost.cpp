// The cost model's terms, per pipeline stage (see step_cost.h). B global rows, T positions,
// C = n_embd; per device: b rows of a microbatch (T / cp of their positions under context
// parallelism), and the heads / MLP / vocab shares of the tensor-parallel axis. Matmul FLOPs per
// token of one block, forward: 2 x each dense weight's size over its tensor-parallel share (GPT-2:
// c_attn 6C^2 and c_proj 2C^2 over the heads' share, the MLP's 16C^2 over its share; llama: q, k,
// v, o, gate, up, down alike), the attention core 4TC (QK^T and PV, computed whole: the kernel does not
// skip the masked half); the head 2CV. Backward is twice the forward; remat full replays the
// blocks' forward, selective the attention core. Under train.optimizer muon, once per step: the
// Newton-Schulz FLOPs of the stage member that owns the most (muon/muon_matrices.h's placement),
// and each Muon matrix's all-gather along its sharded dims and its broadcast from its owner.
// A sparse layer (model.moe) computes k of its E experts per token (the router's 2CE, k expert
// SwiGLUs of 6CI over the experts' mlp share, a shared expert's 6CS and its gate's 2C), on any
// expert layout: balanced routing gives each device k rows per token it sends. Expert parallelism
// adds, per sparse layer and microbatch, the counts' all-gather and two all-to-alls forward (the
// rows out in the matmul dtype, the outputs home in fp32), the same two reversed backward, and a
// replayed forward's again under remat full; an expert's gradient is whole where it is held (its
// tokens came to it), so it is not all-reduced over the expert axes. Tensor parallelism within an
// expert sums each token's k partial outputs forward: k streams where a dense MLP sums one.
#include "plan/step_cost.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "inspect/expert_memory.h"
#include "kernels/cpu/cpu_features.h"
#include "model/params.h"
#include "muon/muon_matrices.h"
#include "util/error.h"

namespace spmd {

namespace {
constexpr double kFloatBytes = 4;
// Elementwise passes over each activation byte a microbatch keeps without recomputation: written
// in forward, read in backward, its gradient written (a replay writes the dropped bytes once
// more); and AdamW's per-parameter traffic: read p, g, m, v; write p, m, v. Muon's momentum step
// passes about as often over a matrix's bytes (read g, buf, p; write buf, the Nesterov update, p;
// read that update), so the optimizer's traffic is this per parameter byte under either.
constexpr double kActivationPasses = 3;
constexpr double kAdamWPasses = 7;

double ring_all_reduce(const LinkRate& l, double bytes, int64_t n) {
  return l.latency_s + 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * bytes / l.bytes_per_s;
}
double ring_gather(const LinkRate& l, double full_bytes, int64_t n) {  // all-gather or reduce-scatter
  return l.latency_s + static_cast<double>(n - 1) / static_cast<double>(n) * full_bytes / l.bytes_per_s;
}

std::vector<std::string> all_axes(const std::vector<std::vector<std::string>>& per_dim) {
  std::vector<std::string> out;
  for (const auto& d : per_dim) out.insert(out.end(), d.begin(), d.end());
  return out;
}

struct StageShape {
  int64_t stage = 0;
  int64_t layers = 0;  // blocks over all the stage's chunks
  int64_t chunks = 1;  // interleaved: the stage's virtual stages, each received and sent on
  bool first = false, last = false;
  double tokens = 0;  // one microbatch's tokens on one device
  int64_t tp_heads = 1, tp_mlp = 1, tp_vocab = 1;
  double vocab = 0, C = 0, T = 0;
  double attention_width = 0;  // n_head x head_dim (C unless model.head_dim says otherwise)
  double block_dense = 0;  // matmul FLOPs per token of one dense block's dense layers on one device, forward
  double sparse_block = 0; // the same for a block whose MLP is the routed experts (k of E active)
  int64_t sparse_layers = 0;  // the stage's sparse blocks (over all its chunks)
  ExpertShapes experts;
  double operand = kFloatBytes;  // bytes per matmul operand (the rows the experts' all-to-all sends)
  int64_t cp = 1;
  bool ring = false;  // ring attention: only the visible blocks, (2cp + 1) of 4cp, are computed
};

// The tensor-parallel share of `logical`'s dim of a weight.
int64_t tp_share(const ModelLayout& layout, const ParamInfo& info, const std::string& logical) {
  const ParamLayout& p = layout.param(info.name);
  for (size_t d = 0; d < info.logical.size(); ++d)
    if (info.logical[d] == logical) return layout.mesh.axes_size(p.tp_axes[d]);
  return 1;
}

// The mesh axes the MLP's hidden dim is split over: the blocks' tensor parallelism (a model
// without a dense MLP: its experts' mlp dim).
std::vector<std::string> mlp_tp_axes(const ModelLayout& layout) {
  const int64_t dense = first_dense_layer(layout.model);
  if (dense < 0) return expert_shapes(layout).mlp_axes;
  const std::vector<ParamInfo> table = layer_entries(param_table(layout.model, layout.padded_vocab), dense);
  const ParamInfo& fc = *block_weights(table).mlp_in.front();
  const size_t dim = static_cast<size_t>(std::find(fc.logical.begin(), fc.logical.end(), "mlp") - fc.logical.begin());
  return layout.param(fc.name).tp_axes[dim];
}

// Forward matmul FLOPs per token of `group`'s weights on one device: 2 x each over its
// tensor-parallel share.
double group_flops(const ModelLayout& layout, const std::vector<const ParamInfo*>& group) {
  double flops = 0;
  for (const ParamInfo* info : group) {
    const ParamLayout& p = layout.param(info->name);
    int64_t share = 1;
    for (const auto& axes : p.tp_axes) share *= layout.mesh.axes_size(axes);
    const int64_t numel = std::accumulate(info->shape.begin(), info->shape.end(), int64_t{1}, std::multiplies<>());
    flops += 2 * static_cast<double>(numel) / static_cast<double>(share);
  }
  return flops;
}

// Forward matmul FLOPs per token of a sparse MLP on one device: the router's, k experts', and a
// shared expert with its gate.
double sparse_mlp_flops(const ExpertShapes& e, double C) {
  const double k = static_cast<double>(e.per_token), E = static_cast<double>(e.experts);
  const double I = static_cast<double>(e.expert_mlp), S = static_cast<double>(e.shared_mlp);
  return 2 * C * E + k * 6 * C * I + (S > 0 ? 6 * C * S + 2 * C : 0);
}

// The bytes of a matmul operand where the products run (inspect's operand_bytes).
double operand_bytes_of(const ModelLayout& layout) {
  const bool bf16 = layout.model.matmul_dtype == MatmulDtype::kBFloat16;
  return bf16 && (layout.on_gpu || kernels::cpu::takes_bf16_products()) ? 2 : kFloatBytes;
}

StageShape stage_shape(const Config& config, const ModelLayout& layout, int64_t stage) {
  const auto& m = config.model;
  const auto& p = layout.pipeline;
  StageShape s;
  s.stage = stage;
  s.layers = p.blocks_of_stage(stage);
  s.chunks = p.chunks;
  // The embeddings come before the first stage's chunk 0, the head after the last stage's last chunk.
  s.first = stage == 0, s.last = stage == p.stages() - 1;
  // Context parallelism: T / cp of each row's positions (their queries still attend over all T keys).
  s.tokens = static_cast<double>(config.data.batch_size / layout.dp_size() / config.train.microbatches * m.block_size /
                                 layout.cp_size());
  // The dense blocks' weights (a model whose first layers are sparse: the first dense layer's).
  const int64_t dense = first_dense_layer(m);
  const std::vector<ParamInfo> table = layer_entries(param_table(m, layout.padded_vocab), std::max<int64_t>(dense, 0));
  const BlockWeights w = block_weights(table);
  s.tp_heads = tp_share(layout, *w.attention_in.front(), "heads");
  s.tp_vocab = layout.mesh.axes_size(layout.param(head_table(m)).tp_axes[0]);
  const double attention = group_flops(layout, w.attention_in) + group_flops(layout, w.attention_out);
  s.block_dense = attention + (dense < 0 ? 0 : group_flops(layout, w.mlp_in) + group_flops(layout, w.mlp_out));
  s.experts = expert_shapes(layout);
  if (s.experts.enabled()) s.sparse_block = attention + sparse_mlp_flops(s.experts, static_cast<double>(m.n_embd));
  for (int64_t k = 0; k < p.chunks; ++k)
    for (int64_t l = p.chunk_begin(stage, k); l < p.chunk_end(stage, k); ++l) s.sparse_layers += m.moe.sparse_layer(l);
  s.operand = operand_bytes_of(layout);
  s.vocab = static_cast<double>(layout.padded_vocab), s.C = static_cast<double>(m.n_embd);
  s.T = static_cast<double>(m.block_size);
  s.attention_width = static_cast<double>(m.n_head * m.head_dim());
  s.cp = layout.cp_size();
  s.ring = s.cp > 1 && layout.context_exchange == ContextExchange::kRing;
  return s;
}

// Matmul FLOPs of one microbatch through the stage (forward, backward, recomputation): the
// dense layers' and the head's, and the attention core's (QK^T and PV).
struct MicrobatchFlops {
  double dense = 0, core = 0;
  double total() const { return dense + core; }
};

MicrobatchFlops microbatch_flops(const StageShape& s, Remat remat) {
  const double attn_core = 4 * s.T * s.attention_width / static_cast<double>(s.tp_heads);
  // Ring attention computes the visible (chunk x chunk) blocks only, and its backward replays
  // their scores: 5 block products for the forward's 2, where autograd's backward takes 4.
  const double visible = s.ring ? static_cast<double>(2 * s.cp + 1) / static_cast<double>(4 * s.cp) : 1.0;
  const double core_passes = s.ring ? 3.5 : 3;
  const double layers = static_cast<double>(s.layers);
  const double head = s.last ? s.tokens * 2 * s.C * s.vocab / static_cast<double>(s.tp_vocab) : 0;
  const double sparse = static_cast<double>(s.sparse_layers);
  const double blocks = s.tokens * ((layers - sparse) * s.block_dense + sparse * s.sparse_block);
  const double core = s.tokens * attn_core * visible;
  MicrobatchFlops f{3 * (blocks + head), core_passes * layers * core};
  if (remat == Remat::kFull) f.dense += blocks, f.core += layers * core;
  if (remat == Remat::kSelective) f.core += layers * core;
  return f;
}

// Tensor parallelism within the routed experts (their `mlp` dim split; parallel/expert_ops.cpp),
// one microbatch, per sparse block: forward each token's k partial outputs, (b, T, k, C) fp32,
// summed over the group (a replay again), and backward the input's gradient, one stream. Under
// sequence parallelism: forward the stream and the choice (int64) gathered and the outputs
// reduce-scattered; backward the outputs' gradient gathered and the stream's reduce-scattered.
double within_experts_s(const Config& config, const ModelLayout& layout, const StageShape& s, const MachineRates& r) {
  const ExpertShapes& e = s.experts;
  const int64_t n = e.mlp_share;
  if (s.sparse_layers == 0 || n == 1) return 0;
  const LinkRate link = r.link(e.mlp_axes, n);
  const double stream = s.tokens * s.C * kFloatBytes, k = static_cast<double>(e.per_token);
  const double outputs = k * stream, choice = s.tokens * k * 8;
  double forward = ring_all_reduce(link, outputs, n), backward = ring_all_reduce(link, stream, n);
  if (!layout.seq_axes.empty()) {
    forward = ring_gather(link, stream, n) + ring_gather(link, choice, n) + ring_gather(link, outputs, n);
    backward = ring_gather(link, outputs, n) + ring_gather(link, stream, n);
  }
  const double replays = config.runtime.remat == Remat::kFull ? 1 : 0;
  return static_cast<double>(s.sparse_layers) * ((1 + replays) * forward + backward);
}

// Tensor parallelism, one microbatch: per block two all-reduces of the (b, T, C) stream forward
// and two backward (sequence parallelism: a gather and a reduce-scatter for each, one latency
// more), the attention's and the dense MLP's; a replayed forward repeats its two; a sparse block's
// MLP is within_experts_s's instead; the vocab-parallel embedding's and the head's input
// all-reduces, and the loss's three (b, T) reductions.
double tensor_parallel_s(const Config& config, const ModelLayout& layout, const StageShape& s, const MachineRates& r) {
  const std::vector<std::string> axes = mlp_tp_axes(layout);
  const int64_t n = layout.mesh.axes_size(axes);
  const double experts = within_experts_s(config, layout, s, r);
  if (n == 1) return experts;
  const LinkRate link = r.link(axes, n);
  const double stream = s.tokens * s.C * kFloatBytes;
  const double one = ring_all_reduce(link, stream, n) + (layout.seq_axes.empty() ? 0 : link.latency_s);
  const double passes = config.runtime.remat == Remat::kFull ? 3 : 2;  // forward, backward, replay
  const double sparse = static_cast<double>(s.sparse_layers), dense = static_cast<double>(s.layers) - sparse;
  double t = (2 * dense + sparse) * passes * one + experts;
  if (s.first && s.tp_vocab > 1) t += one;
  if (s.last && s.tp_vocab > 1) t += one + 3 * ring_all_reduce(link, s.tokens * kFloatBytes, n);
  return t;
}

// Context parallelism, one microbatch: per block the keys and values of the rank's heads,
// (b, T, 2C) over the heads' share, all-gathered over the context axes forward (again in a
// replay: full remat replays the block, selective the gather with the attention), and their
// gradients reduce-scattered backward; or, by ring, sent member to member (a point-to-point link
// at the axis's rate).
double context_parallel_s(const Config& config, const ModelLayout& layout, const StageShape& s, const MachineRates& r) {
  const int64_t n = layout.cp_size();
  if (n == 1) return 0;
  const LinkRate link = s.ring ? r.link(layout.context_axes, n) : r.gather_link(layout.context_axes, n);
  const double kv = s.tokens * static_cast<double>(n) * 2 * s.attention_width / static_cast<double>(s.tp_heads) * kFloatBytes;
  const double replays = config.runtime.remat == Remat::kNone ? 0 : 1;
  if (s.ring) {
    // Forward (and a replay) n - 1 shifts of a member's keys and values; backward n - 1 more, and
    // n shifts of their gradients.
    const double shift = link.latency_s + kv / static_cast<double>(n) / link.bytes_per_s;
    return static_cast<double>(s.layers) * ((1 + replays) * static_cast<double>(n - 1) + static_cast<double>(2 * n - 1)) * shift;
  }
  return static_cast<double>(s.layers) * (2 + replays) * ring_gather(link, kv, n);
}

// Expert parallelism, one microbatch: the bytes a device sends by all-to-all (each of the four
// exchanges per sparse layer: forward the rows out and the outputs home, backward their gradients
// the other way), and their seconds with each exchange's and the counts' gather's latency.
struct ExpertExchange {
  double bytes = 0, seconds = 0;
};

ExpertExchange expert_parallel_exchange(const Config& config, const StageShape& s, const MachineRates& r) {
  const ExpertShapes& e = s.experts;
  const int64_t n = e.expert_parallel;
  if (s.sparse_layers == 0 || n == 1) return {};
  const LinkRate link = r.link(e.expert_axes, n);
  const double rows = s.tokens * static_cast<double>(e.per_token);
  const double forward = all_to_all_bytes(rows, s.C * s.operand, n) + all_to_all_bytes(rows, s.C * kFloatBytes, n);
  const double replays = config.runtime.remat == Remat::kFull ? 1 : 0;
  const double layers = static_cast<double>(s.sparse_layers);
  ExpertExchange x;
  x.bytes = layers * (2 + replays) * forward;
  // Per forward (and replay): the counts' all-gather and 2 exchanges; backward: 2 exchanges.
  x.seconds = layers * ((1 + replays) * 3 + 2) * link.latency_s + x.bytes / link.bytes_per_s;
  return x;
}

// FSDP, one microbatch: each sharded weight gathered for forward and again for backward, its
// gradient reduce-scattered; a replayed forward gathers once more.
double fsdp_s(const Config& config, const ModelLayout& layout, int64_t rank, const MachineRates& r) {
  double t = 0;
  const double gathers = config.runtime.remat == Remat::kFull ? 3 : 2;
  for (const auto& p : layout.params) {
    if (!p.sharding.holds(rank) || !p.is_fsdp()) continue;
    const auto axes = all_axes(p.fsdp_axes);
    const int64_t n = layout.mesh.axes_size(axes);
    const auto shape = p.gathered_shape();
    const double bytes = kFloatBytes * static_cast<double>(std::accumulate(shape.begin(), shape.end(), int64_t{1},
                                                                          std::multiplies<>()));
    t += (gathers + 1) * ring_gather(r.gather_link(axes, n), bytes, n);
  }
  return t;
}

// Pipeline, one microbatch, per chunk of the stage: the stream received from the previous virtual
// stage and its gradient sent back, except on the first stage's chunk 0; the stream sent on and
// its gradient received, except on the last stage's last chunk. Interleaved with v chunks: a
// microbatch crosses v*p - 1 boundaries instead of p - 1.
double pipeline_p2p_s(const ModelLayout& layout, const StageShape& s, const MachineRates& r) {
  if (layout.pipeline.axis.empty()) return 0;
  const LinkRate link = r.link({layout.pipeline.axis}, 2);
  const double stream = s.tokens / static_cast<double>(layout.mesh.axes_size(layout.seq_axes)) * s.C * kFloatBytes;
  const int64_t transfers = 2 * (s.chunks - (s.first ? 1 : 0)) + 2 * (s.chunks - (s.last ? 1 : 0));
  return static_cast<double>(transfers) * (link.latency_s + stream / link.bytes_per_s);
}

// Once per step: gradients all-reduced over the token axes (batch and context) a parameter is
// replicated on (in runtime.grad_bucket_mb buckets), and the tied embedding's gradient between
// the end stages.
void step_collectives(const Config& config, const ModelLayout& layout, int64_t rank, const MachineRates& r,
                      StepCost& cost) {
  std::map<std::vector<std::string>, double> bytes_by_axes;
  for (const auto& p : layout.params) {
    if (!p.sharding.holds(rank)) continue;
    // An expert's gradient is whole where it is held: every member's tokens reached it.
    auto sharded = all_axes(p.fsdp_axes);
    sharded.insert(sharded.end(), p.expert_axes.begin(), p.expert_axes.end());
    std::vector<std::string> replicated;
    for (const auto& a : layout.token_axes())
      if (std::find(sharded.begin(), sharded.end(), a) == sharded.end()) replicated.push_back(a);
    if (layout.mesh.axes_size(replicated) > 1)
      bytes_by_axes[replicated] += kFloatBytes * static_cast<double>(p.sharding.shard_numel());
  }
  const double bucket = config.runtime.grad_bucket_mb * 1024 * 1024;
  for (const auto& [axes, bytes] : bytes_by_axes) {
    const int64_t n = layout.mesh.axes_size(axes);
    const LinkRate link = r.link(axes, n);
    const double buckets = bucket > 0 ? std::ceil(bytes / bucket) : 1;
    cost.comm_s[fmt::format("grad all-reduce ({})", fmt::join(axes, "x"))] +=
        buckets * link.latency_s + ring_all_reduce(link, bytes, n) - link.latency_s;
  }
  const auto& pipeline = layout.pipeline;
  // A tied head's wte is on the first and the last stage: its two gradients are summed.
  const bool tied = layout.model.tie_embeddings;
  if (tied && pipeline.stages() > 1 && (layout.stage_of(rank) == 0 || layout.stage_of(rank) == pipeline.stages() - 1)) {
    const double wte = kFloatBytes * static_cast<double>(layout.param("wte").sharding.shard_numel());
    cost.comm_s[fmt::format("tied wte all-reduce ({})", pipeline.axis)] += ring_all_reduce(r.link({pipeline.axis}, 2), wte, 2);
  }
}

// Muon, once per step: the Newton-Schulz FLOPs of the stage member that owns the most (the
// matrices' owners spread by cost over the stage's ranks, every mesh axis but the pipeline's),
// and the seconds of each matrix's all-gathers (fp32, one per sharded dim, as Muon::gather_whole)
// and of its owner's broadcast of the result in ns_dtype to the stage (a pipelined broadcast moves
// the whole once over each link).
struct MuonStepCost {
  double busiest_flops = 0;
  double comm_s = 0;
  std::string axes;  // the stage's mesh axes
};

MuonStepCost muon_step_cost(const Config& config, const ModelLayout& layout, int64_t rank, const MachineRates& r) {
  MuonStepCost out;
  if (config.train.optimizer != Optimizer::kMuon) return out;
  std::vector<std::string> stage_axes;
  for (const auto& axis : layout.mesh.axes())
    if (axis != layout.pipeline.axis) stage_axes.push_back(axis);
  out.axes = fmt::format("{}", fmt::join(stage_axes, "x"));
  const int64_t group = layout.mesh.axes_size(stage_axes);
  const std::vector<MuonMatrix> matrices = plan_muon_matrices(layout, rank, group, config.train.muon.ns_steps);
  std::vector<double> load(static_cast<size_t>(std::max<int64_t>(group, 1)), 0.0);
  const double ns_bytes = config.train.muon.ns_dtype == MatmulDtype::kFloat32 ? 4 : 2;
  for (const MuonMatrix& m : matrices) {
    load[static_cast<size_t>(m.owner)] += m.cost;
    const ParamLayout& p = layout.params[m.param];
    double bytes = kFloatBytes * static_cast<double>(p.sharding.shard_numel());
    for (size_t d = 0; d < p.info.shape.size(); ++d) {
      const auto& axes = p.sharding.spec().axes_of(d);
      const int64_t n = layout.mesh.axes_size(axes);
      if (n <= 1) continue;
      bytes *= static_cast<double>(n);
      out.comm_s += ring_gather(r.gather_link(axes, n), bytes, n);
    }
    if (group > 1) {
      const LinkRate link = r.link(stage_axes, group);
      out.comm_s += link.latency_s + ns_bytes * static_cast<double>(m.rows * m.cols) / link.bytes_per_s;
    }
  }
  out.busiest_flops = *std::max_element(load.begin(), load.end());
  return out;
}

StepCost stage_cost(const Config& config, const ModelLayout& layout, const MemoryEstimate& memory, int64_t stage,
                    const MachineRates& r) {
  const int64_t rank = first_rank_of_stage(layout, stage);
  const StageShape s = stage_shape(config, layout, stage);
  const double M = static_cast<double>(config.train.microbatches);
  StepCost cost;
  const MicrobatchFlops flops = microbatch_flops(s, config.runtime.remat);
  cost.flops = M * flops.total();
  // Context parallelism computes attention op by op (one process: a fused kernel).
  const double core_rate = s.cp > 1 ? r.attention_flops_per_s : r.matmul_flops_per_s;
  const double compute = flops.dense / r.matmul_flops_per_s + flops.core / core_rate;
  // Elementwise work does not shrink with recomputation: what remat drops is written again by the
  // replay. A microbatch passes through every chunk of the stage (`memory`'s activations are one chunk's).
  const auto activations = [&](Remat remat) {
    return static_cast<double>(
        stage_activation_bytes(layout, config.data.batch_size, config.train.microbatches, rank, remat));
  };
  const double plain = activations(Remat::kNone);
  const double replayed = plain - activations(config.runtime.remat);
  const double traffic = (kActivationPasses * plain + replayed) / r.memory_bytes_per_s;
  const double tp = tensor_parallel_s(config, layout, s, r), fsdp = fsdp_s(config, layout, rank, r);
  const double p2p = pipeline_p2p_s(layout, s, r), cp = context_parallel_s(config, layout, s, r);
  const ExpertExchange ep = expert_parallel_exchange(config, s, r);
  const double per_microbatch = compute + traffic + tp + fsdp + p2p + cp + ep.seconds;
  const MuonStepCost muon = muon_step_cost(config, layout, rank, r);
  cost.flops += muon.busiest_flops;
  cost.compute_s = M * compute + muon.busiest_flops / r.matmul_flops_per_s;
  if (muon.comm_s > 0) cost.comm_s[fmt::format("Muon gather/broadcast ({})", muon.axes)] = muon.comm_s;
  cost.memory_s = M * traffic + kAdamWPasses * static_cast<double>(memory.params) / r.memory_bytes_per_s;
  const std::string model_axes = fmt::format("{}", fmt::join(mlp_tp_axes(layout), "x"));
  if (tp > 0) cost.comm_s[fmt::format("TP {} ({})", layout.seq_axes.empty() ? "all-reduce" : "gather/scatter", model_axes)] = M * tp;
  if (fsdp > 0) cost.comm_s["FSDP gather/scatter"] = M * fsdp;
  if (cp > 0)
    cost.comm_s[fmt::format("CP K/V {} ({})", s.ring ? "ring" : "gather/scatter", fmt::join(layout.context_axes, "x"))] =
        M * cp;
  if (p2p > 0) cost.comm_s[fmt::format("stage send/receive ({})", layout.pipeline.axis)] = M * p2p;
  if (ep.seconds > 0) cost.comm_s[fmt::format("EP all-to-all ({})", fmt::join(s.experts.expert_axes, "x"))] = M * ep.seconds;
  cost.all_to_all_bytes = M * ep.bytes;
  const double slots = pipeline_fill_slots(config.runtime.pipeline_schedule, layout.pipeline.stages(), config.train.microbatches,
                                          config.runtime.virtual_stages);
  // The step is as long as the schedule's critical path (its slots, each computing as fast as a
  // device alone: idle peers lend it their shared cores; transfers no faster) or its work (M slots
  // with every device busy), whichever is longer; on a device per rank, (slots - M) idle slots.
  const double critical_slot = (compute + traffic) / r.lone_speedup + tp + fsdp + p2p + cp + ep.seconds;
  cost.bubble_s = std::max(0.0, slots * critical_slot - M * per_microbatch);
  step_collectives(config, layout, rank, r, cost);
  cost.total_s = cost.compute_s + cost.memory_s + cost.comm_total() + cost.bubble_s;
  return cost;
}
}  // namespace

double StepCost::comm_total() const {
  double t = 0;
  for (const auto& [name, s] : comm_s) t += s;
  return t;
}

std::string StepCost::dominant() const {
  std::pair<std::string, double> best{"compute", compute_s};
  auto consider = [&](const std::string& name, double s) {
    if (s > best.second) best = {name, s};
  };
  consider("memory traffic", memory_s);
  consider("pipeline bubble", bubble_s);
  for (const auto& [name, s] : comm_s) consider(name, s);
  return best.first;
}

double pipeline_fill_slots(PipelineSchedule schedule, int64_t stages, int64_t microbatches, int64_t virtual_stages) {
  // Interleaved: v chunks per stage, each 1/v of a slot, so the fill and drain shrink to (p-1)/v.
  const double v = schedule == PipelineSchedule::kInterleaved ? static_cast<double>(virtual_stages) : 1.0;
  return static_cast<double>(microbatches) + static_cast<double>(stages - 1) / v;
}

StepCost predict_step(const Config& config, const ModelLayout& layout, const std::vector<MemoryEstimate>& stage_memory,
                      const MachineRates& rates) {
  StepCost slowest;
  for (int64_t s = 0; s < layout.pipeline.stages(); ++s) {
    StepCost c = stage_cost(config, layout, stage_memory[static_cast<size_t>(s)], s, rates);
    if (s == 0 || c.total_s > slowest.total_s) slowest = c;
  }
  return slowest;
}

}  // namespace spmd
