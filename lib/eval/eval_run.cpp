// Scoring from a checkpoint: config and inputs, the sharded model, the forward, the result out.
#include "eval/eval_run.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>

#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_format.h"
#include "ckpt/checkpoint_restore.h"
#include "comm/backend.h"
#include "data/dataset_tokenizer.h"
#include "eval/training_tasks.h"
#include "generate/sample_run.h"
#include "hf/hf_import.h"
#include "model/model.h"
#include "parallel/layout.h"
#include "parallel/parallel_ops.h"
#include "parallel/sharded_model.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace spmd {

Config eval_config(const EvalOptions& options, const std::string& config_path, const std::vector<std::string>& overrides) {
  SPMD_CHECK(!options.checkpoint.empty() || !config_path.empty(),
             "eval needs --checkpoint DIR, or --config FILE whose train.init_from names a Hugging Face GPT-2");
  Config config = sampling_config(options.checkpoint, config_path, overrides);
  SPMD_CHECK(!options.checkpoint.empty() || !config.train.init_from.empty(),
             "{}: train.init_from is empty and there is no --checkpoint: nothing to score (set "
             "train.init_from=DIR with --set, or pass --checkpoint)",
             config.source_path);
  return config;
}

namespace {
bool has_tokenizer_files(const std::string& dir) {
  return fs::is_directory(dir) && ((fs::exists(dir + "/vocab.json") && fs::exists(dir + "/merges.txt")) ||
                                   fs::exists(dir + "/tokenizer.json"));
}
}  // namespace

DatasetMeta eval_tokenizer(const Config& config, const EvalOptions& options) {
  if (!options.checkpoint.empty()) return sampling_tokenizer(config, options.checkpoint);
  if (has_tokenizer_files(config.train.init_from)) return folder_tokenizer(config.train.init_from);
  const std::string beside_data = dataset_meta_path(config.data.train);
  SPMD_CHECK(!beside_data.empty(),
             "train.init_from ({}) holds no tokenizer (vocab.json + merges.txt, or tokenizer.json) and data.train ({}) "
             "has no meta.json beside it",
             config.train.init_from, config.data.train);
  return read_meta(beside_data);
}

void check_eval_inputs(const Config& config, const EvalOptions& options) {
  SPMD_CHECK(options.limit >= 0, "--limit {}: must be 0 (every example) or positive", options.limit);
  if (!options.checkpoint.empty()) checkpoint_config_yaml(options.checkpoint);  // an index is there and readable
  else check_hf_checkpoint(config);
  const DatasetMeta tokenizer = eval_tokenizer(config, options);
  SPMD_CHECK(tokenizer.vocab_size <= config.model.vocab_size,
             "the tokenizer has {} tokens but model.vocab_size is {}", tokenizer.vocab_size, config.model.vocab_size);
  encode_task(tokenizer, options.task, options.limit, config.model.block_size);
}

std::string format_task_score(const std::string& task, const TaskScore& score, bool json) {
  if (!json)
    return fmt::format("{}: {} examples | acc {:.4f} | acc_norm {:.4f}\n", task, score.n, score.acc, score.acc_norm);
  nlohmann::json examples = nlohmann::json::array();
  for (const auto& e : score.examples)
    examples.push_back({{"index", e.index}, {"label", e.label}, {"sum", e.sums}, {"mean", e.means}});
  const nlohmann::json out{{"task", task}, {"n", score.n}, {"acc", score.acc}, {"acc_norm", score.acc_norm},
                           {"examples", examples}};
  return out.dump() + "\n";
}

namespace {
// The model's forward over a batch of rows, without stages (eval_config unstages the layout).
RowLosses checkpoint_row_losses(ShardedModel& model, const Model& net, uint64_t seed) {
  return [&model, &net, seed](const at::Tensor& inputs, const at::Tensor& targets) {
    at::NoGradGuard no_grad;
    ParallelOps ops(model, seed, -1);
    const at::Tensor x = net.blocks(net.embed(inputs, ops, false), 0, net.n_layer(), ops, false);
    return net.head_row_losses(x, targets, ops);
  };
}

void write_result(const EvalOptions& options, const std::string& text) {
  if (options.result_out.empty()) {
    std::cout << text << std::flush;
    return;
  }
  std::ofstream out(options.result_out, std::ios::binary);
  out << text;
  if (!out.flush()) throw RuntimeError(fmt::format("cannot write {}", options.result_out));
}
}  // namespace

ChoiceBatching choice_batching(const ShardedModel& model, int64_t rows_per_rank,
                               const std::vector<EncodedExample>& examples) {
  const ModelLayout& layout = model.layout();
  const int rank = model.comm().rank();
  ChoiceBatching b;
  b.dp_index = layout.dp_index(rank);
  b.dp_size = layout.dp_size();
  b.dp_group = &model.comm().along(layout.batch_axes);
  b.examples_per_rank = examples_per_pass(examples, rows_per_rank);
  b.block_size = layout.model.block_size;
  b.seq_multiple = std::lcm(2 * layout.cp_size(), layout.mesh.axes_size(layout.seq_axes));
  b.device = model.comm().device();
  return b;
}

int run_eval(const Config& config, const RendezvousInfo& rendezvous, bool single_process, const EvalOptions& options) {
  const DatasetMeta tokenizer = eval_tokenizer(config, options);
  const std::vector<EncodedExample> examples =
      encode_task(tokenizer, options.task, options.limit, config.model.block_size);
  const ResolvedRuntime runtime = resolve_runtime(config.runtime);
  ModelLayout layout = plan_layout(config);
  auto comm = single_process ? std::make_unique<Communicator>(layout.mesh, runtime)
                             : std::make_unique<Communicator>(rendezvous, layout.mesh, runtime);
  const uint64_t seed = static_cast<uint64_t>(config.train.seed);
  ShardedModel model(std::move(layout), *comm, seed);
  if (!options.checkpoint.empty()) restore_parameters(model, options.checkpoint);
  else load_hf_checkpoint(model, config.train.init_from);
  const std::unique_ptr<Model> net = make_model(config.model);
  const auto start = std::chrono::steady_clock::now();
  const int64_t rows_per_rank = std::max<int64_t>(1, config.data.batch_size / model.layout().dp_size());
  const TaskScore score = summarize(score_examples(examples, choice_batching(model, rows_per_rank, examples),
                                                   checkpoint_row_losses(model, *net, seed)));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (comm->rank() == 0) {
    write_result(options, format_task_score(options.task, score, options.json));
    fmt::print(stderr, "scored {} examples in {:.2f} s: {:.1f} examples/s (mesh {})\n", score.n, seconds,
               static_cast<double>(score.n) / seconds, model.layout().mesh.describe());
  }
  comm->control().barrier();
  return 0;
}

}  // namespace spmd
