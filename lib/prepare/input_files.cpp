// Walking prepare's inputs (see input_files.h).
#include "prepare/input_files.h"

#include <fnmatch.h>
#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "util/error.h"

namespace spmd {
namespace {

namespace fs = std::filesystem;

bool excluded(const fs::path& path, const fs::path& relative,
              const std::vector<std::string>& exclude) {
  for (const auto& glob : exclude) {
    if (fnmatch(glob.c_str(), path.filename().c_str(), 0) == 0) return true;
    if (!relative.empty() && fnmatch(glob.c_str(), relative.c_str(), FNM_PATHNAME) == 0)
      return true;
    if (fnmatch(glob.c_str(), path.c_str(), FNM_PATHNAME) == 0) return true;
  }
  return false;
}

bool input_has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

// The paths a glob matches, sorted (glob's order); UsageError when none does.
std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> paths;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  SPMD_CHECK(!paths.empty(), "{}: no input file matches this pattern", pattern);
  return paths;
}

// Quoted globs ("data/*.jsonl.zst") expand here; a path that exists is taken as it is.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> expanded;
  for (const auto& input : inputs) {
    std::error_code ec;
    if (!fs::exists(input, ec) && input_has_glob_chars(input)) {
      for (auto& p : expand_glob(input)) expanded.push_back(std::move(p));
    } else {
      expanded.push_back(input);
    }
  }
  return expanded;
}

}  // namespace

std::vector<std::string> collect_input_files(const std::vector<std::string>& inputs,
                                             const std::vector<std::string>& exclude) {
  SPMD_CHECK(!inputs.empty(), "no input files given");
  std::vector<std::string> files;
  std::set<fs::path> seen;  // canonical paths, so a file named twice is read once
  auto add = [&](const fs::path& p) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(p, ec);
    if (seen.insert(ec ? p : canonical).second) files.push_back(p.string());
  };
  for (const auto& input : expand_inputs(inputs)) {
    std::error_code ec;
    fs::path root(input);
    SPMD_CHECK(fs::exists(root, ec), "{}: no such input file or directory", input);
    if (!fs::is_directory(root, ec)) {
      if (!excluded(root, {}, exclude)) add(root);
      continue;
    }
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(root, ec), end;
    SPMD_CHECK(!ec, "{}: cannot read directory: {}", input, ec.message());
    for (; it != end; it.increment(ec)) {
      SPMD_CHECK(!ec, "{}: cannot read directory: {}", input, ec.message());
      const fs::path& p = it->path();
      fs::path relative = p.lexically_relative(root);
      bool hidden = p.filename().string().rfind('.', 0) == 0;
      if (hidden || excluded(p, relative, exclude)) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) found.push_back(p);
    }
    std::sort(found.begin(), found.end());
    for (const auto& p : found) add(p);
  }
  SPMD_CHECK(!files.empty(), "no input files left after the --exclude patterns");
  return files;
}

}  // namespace spmd
