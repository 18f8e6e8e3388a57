// eval.tasks of a training run: each task file read and encoded once, with the run's tokenizer.
#pragma once
#include <vector>

#include "config/config.h"
#include "data/meta.h"
#include "eval/choice_scoring.h"

namespace spmd {

// The tokenizer a training run scores with: the one beside data.train (what the model learns
// from), else train.init_from's folder's. UsageError naming eval.tasks when there is none.
DatasetMeta training_task_tokenizer(const Config& config);

// A Hugging Face folder's tokenizer (vocab.json + merges.txt, or tokenizer.json) as a BPE vocabulary.
DatasetMeta folder_tokenizer(const std::string& dir);

struct LoadedTask {
  EvalTask task;
  std::vector<EncodedExample> examples;
};

// Every task of eval.tasks, encoded; UsageError prefixed with the task's config key.
std::vector<LoadedTask> load_training_tasks(const Config& config);

// Whether `task` is scored after `steps_done` updates of a run of `total_steps`.
bool task_due(const EvalTask& task, int64_t steps_done, int64_t total_steps);

}  // namespace spmd
