// Where a run's tokenizer lives: the meta.json spmd-prepare wrote next to the token files, and
// the vocabulary files beside it. Checkpoints hold a copy, so samples decode without the data.
#pragma once
#include <string>

namespace spmd {

// The meta.json beside the token files a data spec (file, directory or glob) names; "" when the
// tokens were not written by spmd-prepare (or the spec matches nothing).
std::string dataset_meta_path(const std::string& data_spec);

// Copies meta.json and the vocabulary files it names (tokenizer_files) into dest_dir,
// each fsynced. RuntimeError when a copy fails.
void copy_tokenizer(const std::string& meta_path, const std::string& dest_dir);

}  // namespace spmd
