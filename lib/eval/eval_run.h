// `spmd-train eval`: a multiple-choice task scored by a checkpoint (or a Hugging Face GPT-2
// through train.init_from) on any mesh. The launcher checks the inputs once; every rank loads its
// shards and scores its share of the examples; rank 0 writes the result.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/config.h"
#include "data/meta.h"
#include "eval/choice_batches.h"
#include "eval/choice_scoring.h"
#include "parallel/sharded_model.h"

namespace spmd {

struct EvalOptions {
  std::string checkpoint;  // a step directory; "" : the config's train.init_from
  std::string task;        // HellaSwag-format JSON Lines
  int64_t limit = 0;       // the first K examples; 0: all
  bool json = false;       // the result as one JSON object (with every example's scores)
  std::string result_out;  // a file for the result; "" : stdout
};

// The checkpoint's config (or `config_path`'s) with `overrides`, unstaged for scoring as for
// sampling. UsageError when there is neither a checkpoint nor a config with train.init_from.
Config eval_config(const EvalOptions& options, const std::string& config_path, const std::vector<std::string>& overrides);

// The tokenizer the model carries: the checkpoint's, else the Hugging Face folder's (vocab.json +
// merges.txt, or tokenizer.json), else the one beside data.train. UsageError when none.
DatasetMeta eval_tokenizer(const Config& config, const EvalOptions& options);

// Everything that can be checked before any process starts (UsageError): the model's files, the
// tokenizer, the task file, every example's encoding.
void check_eval_inputs(const Config& config, const EvalOptions& options);

// The result as a person reads it (one line) or as --json prints it.
std::string format_task_score(const std::string& task, const TaskScore& score, bool json);

// How `examples` go over the model's data-parallel ranks, about rows_per_rank rows per forward.
ChoiceBatching choice_batching(const ShardedModel& model, int64_t rows_per_rank,
                               const std::vector<EncodedExample>& examples);

// One rank of an eval run. Returns the exit code.
int run_eval(const Config& config, const RendezvousInfo& rendezvous, bool single_process, const EvalOptions& options);

}  // namespace spmd
