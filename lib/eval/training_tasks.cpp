// Reading eval.tasks for a training run.
#include "eval/training_tasks.h"

#include <filesystem>

#include <fmt/format.h>

#include "data/dataset_tokenizer.h"
#include "tokenizer/bpe_files.h"
#include "util/error.h"

namespace spmd {

DatasetMeta folder_tokenizer(const std::string& dir) {
  DatasetMeta meta;
  meta.vocab = VocabKind::kBpe;
  meta.bpe = std::make_shared<const BpeTokenizer>(read_tokenizer_dir(dir));
  meta.vocab_size = meta.bpe->vocab_size();
  meta.eot_token = meta.bpe->eot_id();
  meta.tokenizer_source = dir;
  return meta;
}

DatasetMeta training_task_tokenizer(const Config& config) {
  const std::string beside_data = dataset_meta_path(config.data.train);
  if (!beside_data.empty()) return read_meta(beside_data);
  const std::string& hf = config.train.init_from;
  SPMD_CHECK(!hf.empty() && std::filesystem::is_directory(hf),
             "eval.tasks needs the tokenizer of data.train ({}): no meta.json beside it (prepare the data with "
             "spmd-prepare), and no train.init_from folder with vocab.json + merges.txt",
             config.data.train);
  return folder_tokenizer(hf);
}

std::vector<LoadedTask> load_training_tasks(const Config& config) {
  std::vector<LoadedTask> tasks;
  if (config.eval.tasks.empty()) return tasks;
  const DatasetMeta tokenizer = training_task_tokenizer(config);
  for (size_t i = 0; i < config.eval.tasks.size(); ++i) {
    const EvalTask& task = config.eval.tasks[i];
    try {
      tasks.push_back({task, encode_task(tokenizer, task.path, task.limit, config.model.block_size)});
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("eval.tasks[{}] ({}): {}", i, task.name, e.what()));
    }
  }
  return tasks;
}

bool task_due(const EvalTask& task, int64_t steps_done, int64_t total_steps) {
  return steps_done % task.every == 0 || steps_done == total_steps;
}

}  // namespace spmd
