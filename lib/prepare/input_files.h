// The files that prepare reads: files as given, globs expanded (sorted), directories walked
// recursively (sorted, dot-files skipped), minus anything an --exclude glob matches.
#pragma once
#include <string>
#include <vector>

namespace spmd {

// An exclude glob (fnmatch) matches a file or directory by its name ("*.dat", "off"), its path
// below the input directory ("off/*") or its full path. Duplicates are dropped. UsageError names a
// missing input; an empty result is a UsageError too.
std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs,
                                             const std::vector<std::string>& exclude);

}  // namespace spmd
