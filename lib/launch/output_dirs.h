// Checks, before any training, that output.dir and checkpoint.dir can be created and written.
#pragma once
#include "config/config.h"

namespace spmd {

// UsageError naming the key and the directory when it cannot be created or written.
void check_output_dirs(const Config& config);

}  // namespace spmd
