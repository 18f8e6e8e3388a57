// Typed configuration of a run: parsed from YAML once, validated once (see config.cpp).
// Every field has a default; a YAML key that is not listed here is an error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/choices.h"  // PipelineSchedule, Remat, ContextExchange, MatmulDtype and their names
#include "mesh/sharding.h"  // ShardingRule: the rules are the mesh's values, read from YAML here

namespace spmd {

struct MeshConfig {
  std::vector<int64_t> shape{1};          // devices per axis; product = number of processes
  std::vector<std::string> axes{"data"};  // one unique name per axis
};

// Llama 3's rotary frequency scaling (model.rope_scaling): wavelengths longer than
// original_max_position_embeddings / low_freq_factor are divided by factor, those shorter than
// original / high_freq_factor kept, those between blended. factor 0: no scaling.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
};

// model.moe: routed experts in the Llama family's MLPs (docs/experts.md), the keys spelled as a
// Hugging Face config.json spells them. num_experts 0: a dense model.
struct MoeConfig {
  int64_t num_experts = 0;                  // routed experts per sparse layer
  int64_t num_experts_per_tok = 2;          // k: the experts each token reaches (top-k)
  int64_t moe_intermediate_size = 0;        // each expert's SwiGLU width; 0: model.intermediate_size
  bool norm_topk_prob = false;              // renormalise the k weights to sum 1 (Mixtral: always)
  double router_aux_loss_coef = 0.001;      // the load-balancing loss's weight in the training loss; 0: off
  std::vector<int64_t> mlp_only_layers;     // layers that keep the dense MLP
  int64_t decoder_sparse_step = 1;          // layer l is sparse when (l + 1) % step == 0 (and not mlp-only)
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert beside the routed ones; 0: none
  // DeepSeek-V3's auxiliary-loss-free balancing: each expert's bias, added to the scores for the
  // choice only, moves by this much after each step toward the global mean load; 0: off.
  double expert_bias_update_rate = 0;

  bool enabled() const { return num_experts > 0; }
  int64_t expert_size(int64_t dense_size) const { return moe_intermediate_size > 0 ? moe_intermediate_size : dense_size; }
  bool sparse_layer(int64_t layer) const;
  bool operator==(const MoeConfig& other) const;
};

struct ModelConfig {
  // The family (docs/models.md): gpt2 (learned positions, LayerNorm, GELU MLP, tied head) or llama
  // (rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention, no biases).
  ModelArch arch = ModelArch::kGpt2;
  int64_t vocab_size = 65;   // tokens in the vocabulary (padded up when `vocab` is sharded)
  int64_t block_size = 64;   // context length
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool bias = true;          // biases in linear layers and LayerNorms
  // Operands of the dense products and the LM head: float32, or bfloat16 (float32 accumulation,
  // as autocast); parameters, optimizer state, attention, LayerNorm and the loss stay float32.
  MatmulDtype matmul_dtype = MatmulDtype::kFloat32;
  // llama only (the config refuses them for gpt2, whose values are the ones below).
  int64_t n_kv_head = 0;          // key/value heads, dividing n_head; 0: n_head
  int64_t intermediate_size = 0;  // the SwiGLU MLP's width; 0: 4 x n_embd
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  bool tie_embeddings = true;     // the head is wte (gpt2 always; llama's default is false: lm_head)
  bool qk_norm = false;           // RMSNorm of each query and key head before the rotation (Qwen3)
  int64_t attention_head_dim = 0; // model.head_dim: each head's width (Qwen3: 128 whatever the width); 0: n_embd / n_head
  MoeConfig moe;                  // routed experts (llama only)

  int64_t head_dim() const { return attention_head_dim > 0 ? attention_head_dim : n_embd / n_head; }
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t mlp_size() const { return intermediate_size > 0 ? intermediate_size : 4 * n_embd; }
  int64_t expert_mlp_size() const { return moe.expert_size(mlp_size()); }
  // Layers whose MLP is the routed experts, in order.
  std::vector<int64_t> sparse_layers() const;
};

// One corpus of a weighted blend (data.sources; docs/data-blends.md).
struct DataSource {
  std::string name;    // unique; names the source in the blend's order and in val_loss/<name>
  std::string path;    // prepared token data, as data.train takes it
  double weight = 1;   // a proportion: any positive number (Grain's mix scales them to integers)
  std::string val;     // optional: this source's validation data, evaluated as val_loss/<name>
};

struct DataConfig {
  std::string train;         // token file, directory or glob of shards
  // A weighted blend in place of `train` (exactly one of the two): Grain's MapDataset.mix order.
  std::vector<DataSource> sources;
  std::string val;
  int64_t batch_size = 12;   // global sequences per step, split over data-parallel ranks
  int64_t window_stride = 0; // tokens between training windows' starts; 0: block_size (no overlap)
  // Packed documents (docs/packing.md): each eot_token ends its document inside a window; a token
  // attends only to its own document's earlier tokens and positions restart at 0 per document.
  bool document_mask = false;
  int64_t eot_token = -1;    // -1: the tokenizer's end-of-text id from data.train's meta.json
};

// The data whose meta.json names the run's tokenizer: data.train, or the blend's first source
// (every source has the same tokenizer: the pre-launch check compares them).
inline const std::string& tokenizer_data_path(const DataConfig& data) {
  return data.sources.empty() ? data.train : data.sources.front().path;
}

// train.muon: torch.optim.Muon's settings and defaults (PyTorch >= 2.9; docs/optimizers.md).
struct MuonConfig {
  double lr = 1.0e-3;          // scaled over the run by train.lr_schedule's factor, as train.lr
  double weight_decay = 0.1;   // decoupled, with the unadjusted lr, before the update
  double momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;        // Newton-Schulz iterations
  std::vector<double> ns_coefficients{3.4445, -4.775, 2.0315};  // (a, b, c) of the quintic
  double eps = 1e-7;           // floor of the Frobenius norm the iteration starts by dividing by
  MuonAdjustLr adjust_lr_fn = MuonAdjustLr::kOriginal;
  // The iteration's dtype: bfloat16 as torch, or float32 (every mesh then equals one process to
  // float rounding; bf16 amplifies rounding differences of its input).
  MatmulDtype ns_dtype = MatmulDtype::kBFloat16;
  bool operator==(const MuonConfig& other) const;
};

struct TrainConfig {
  int64_t steps = 2000;
  // The learning rate's course (optim/lr_schedule.h, docs/config.md's schedule table): cosine
  // (nanoGPT's) | wsd (warmup, stable, decay over the last decay_steps steps) | linear (warmup,
  // then straight down to min_lr at decay_steps) | constant (warmup, then lr).
  LrSchedule lr_schedule = LrSchedule::kCosine;
  // cosine and linear: the step at which the decay reaches min_lr; wsd: the decay's length.
  int64_t decay_steps = 2000;
  DecayShape decay_shape = DecayShape::kLinear;  // wsd only: linear | cosine | 1-sqrt
  int64_t seed = 1337;
  double lr = 1.0e-3;
  double min_lr = 1.0e-4;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double grad_clip = 1.0;      // 0 disables clipping
  // adamw: AdamW (the settings above) for every parameter. muon: Muon (train.muon) for the
  // blocks' matrices, AdamW for embeddings, head, norms and biases (docs/optimizers.md).
  Optimizer optimizer = Optimizer::kAdamW;
  MuonConfig muon;
  int64_t eval_every = 250;    // 0 disables evaluation
  int64_t eval_batches = 20;
  int64_t log_every = 10;
  bool skip_nonfinite = false; // skip a step with a NaN/Inf loss or gradient instead of stopping
  // Gradient accumulation: each rank's rows of a step are split into this many microbatches along
  // the batch dim, forwarded and backwarded one at a time (activations for one at a time); their
  // gradients sum into one update equal to the whole batch's. data.batch_size must divide by the
  // data-parallel degree x microbatches.
  int64_t microbatches = 1;
  int64_t sample_every = 0;    // print a short generated text every N steps (llm.c's); 0: never
  // A Hugging Face GPT-2 checkpoint to start from (model.safetensors, or a directory holding it and
  // config.json; lib/hf/hf_import.h): parameters only; optimizer and step start fresh. Ignored
  // with --resume (the checkpoint wins). Empty: the usual random init.
  std::string init_from;
};

// A multiple-choice task scored while training (HellaSwag's JSON Lines; lib/eval).
struct EvalTask {
  std::string name;     // the metrics' eval/<name>/...: letters, digits, '_', '-', '.'
  std::string path;     // the task file
  int64_t every = 500;  // steps between scorings (and at the end)
  int64_t limit = 0;    // the first K examples; 0: all
};

struct EvalConfig {
  std::vector<EvalTask> tasks;
};

struct CheckpointConfig {
  std::string dir;           // empty: no checkpoints
  int64_t every = 500;
  int64_t keep = 3;
  // Write in the background (ckpt/checkpoint_saver.h): the step copies the shards into a host
  // staging buffer and training goes on while a thread writes them. false: the step waits for the
  // files and the commit.
  bool async = true;
};

struct OutputConfig {
  std::string dir = "out";   // metrics.jsonl and logs
};

struct RuntimeConfig {
  std::string backend = "gloo";  // gloo | nccl | auto
  std::string device = "cpu";    // cpu | cuda | auto
  int64_t threads_per_rank = 0;  // 0 = auto: cores / local ranks
  double timeout_s = 300;        // collective and rendezvous timeout
  double grad_bucket_mb = 25;    // data-parallel gradient bucket; 0: one all-reduce after backward
  bool fsdp_prefetch = true;     // start the next FSDP weight's all-gather while this layer computes
  bool tf32 = true;              // CUDA: fp32 matmuls on tensor cores (TF32); nothing changes on the CPU
  // Pipeline stages (a `layers` sharding rule): the order of microbatch passes on each stage, and
  // an explicit number of blocks per virtual stage (empty: n_layer split evenly).
  PipelineSchedule pipeline_schedule = PipelineSchedule::kOneFOneB;  // 1f1b | gpipe | interleaved
  // Interleaved 1F1B: block chunks per stage; chunk k of stage s is virtual stage k * stages + s.
  int64_t virtual_stages = 1;
  std::vector<int64_t> pipeline_layers;
  // Activation recomputation: none | full (keep each block's input, recompute the block in
  // backward) | selective (recompute the attention core, keep the matmul outputs).
  Remat remat = Remat::kNone;
  // Context parallelism's exchange of keys and values: all_gather (each block gathers the whole
  // sequence's) | ring (they travel around the context axes; only the blocks the causal mask
  // leaves visible are computed, and no (T/cp, T) probabilities are kept).
  ContextExchange context_exchange = ContextExchange::kAllGather;
  // On a CPU: fused (the CPU's own kernels) | generic (the GPU's code path: device-generic ops,
  // bf16 products, the update decided on the device; slower, for tests and the census).
  CpuKernels cpu_kernels = CpuKernels::kFused;
};

struct Config {
  MeshConfig mesh;
  std::vector<ShardingRule> sharding_rules;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  OutputConfig output;
  RuntimeConfig runtime;
  std::string source_path;   // the YAML file it came from
  std::string resolved_yaml; // the effective config (file + overrides) as YAML, for logs/checkpoints
};

// Loads `path`, applies `overrides` ("dotted.key=YAML value", later ones win), validates.
// Throws UsageError whose message names file:line:col and the key.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Same, from YAML text (for tests); `name` stands in for the file name in messages.
Config parse_config(const std::string& yaml_text, const std::string& name,
                    const std::vector<std::string>& overrides = {});

// The config as YAML text (what Config::resolved_yaml holds); parses back to the same Config.
std::string to_yaml(const Config& config);

}  // namespace spmd
