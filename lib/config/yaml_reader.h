// Reading a YAML config with precise errors: the parsed document plus `--set` overrides, and a
// per-map reader that rejects unknown keys and converts values. Every error is a UsageError
// "<where>: <dotted.key>: <what>", where <where> is name:line:col or the `--set` that set it.
#pragma once
#include "util/did_you_mean.h"  // did_you_mean: the config's unknown keys
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace spmd {

// One YAML document (from a file or text) with `--set key=value` overrides applied on top.
class YamlDoc {
 public:
  // Parses `text`; syntax errors and multi-document input throw UsageError naming name:line:col.
  YamlDoc(const std::string& text, std::string name);

  // Applies "dotted.key=YAML value": replaces (or creates) that key, creating missing maps.
  void apply_override(const std::string& spec);

  const YAML::Node& root() const { return root_; }
  const std::string& name() const { return name_; }

  // Where the value at `path` came from: the `--set` that last covered it, else name:line:col.
  std::string where(const std::string& path, const YAML::Mark& mark) const;
  [[noreturn]] void fail(const std::string& path, const YAML::Mark& mark,
                         const std::string& message) const;

 private:
  std::string name_;
  YAML::Node root_;
  // (dotted key, original "--set" text) in application order; a later one shadows earlier ones.
  std::vector<std::pair<std::string, std::string>> overrides_;
};

// Reads one YAML map whose valid keys are known. The constructor rejects unknown and duplicate
// keys (suggesting the closest valid one); absent keys leave the target value untouched.
class MapReader {
 public:
  // `node` may be undefined or null (an absent or empty section: every key keeps its default).
  // `path` is the dotted path of the map itself ("" for the document root); `mark` is where
  // the map is, for messages about it when it has no mark of its own.
  MapReader(const YamlDoc& doc, const YAML::Node& node, std::string path,
            std::vector<std::string> valid_keys, const YAML::Mark& mark);
  // The reader of the nested map at `key`.
  MapReader section(const std::string& key, std::vector<std::string> valid_keys) const;

  bool has(const std::string& key) const;
  YAML::Node get(const std::string& key) const;  // undefined node when absent
  std::string path(const std::string& key) const;
  // Where `key` is: its value, its key if the value is empty, the map if the key is absent.
  YAML::Mark mark(const std::string& key) const;

  // Typed reads that leave `out` unchanged when the key is absent. Null strings read as "".
  void read(const std::string& key, int64_t& out) const;
  void read(const std::string& key, double& out) const;
  void read(const std::string& key, bool& out) const;
  void read(const std::string& key, std::string& out) const;
  void read(const std::string& key, std::vector<int64_t>& out) const;
  void read(const std::string& key, std::vector<std::string>& out) const;

  // Throws "<where>: <path>: <expected>, got <value as written>" unless `ok`.
  void check(const std::string& key, bool ok, const std::string& expected) const;
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  // The same for element `index` of the list at `key` ("mesh.shape[1]").
  void check_item(const std::string& key, size_t index, bool ok,
                  const std::string& expected) const;
  std::string item_path(const std::string& key, size_t index) const;
  YAML::Mark item_mark(const std::string& key, size_t index) const;

  const YamlDoc& doc() const { return doc_; }

 private:
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
  };
  const Entry* find(const std::string& key) const;

  const YamlDoc& doc_;
  std::string path_;
  YAML::Mark mark_;  // of the map itself, for keys that are absent
  std::vector<Entry> entries_;
};

// A whole base-10 integer ("12", "-3", "+4"), or nullopt.
std::optional<int64_t> parse_int(const std::string& text);

// Scalar conversions; on failure they throw via doc.fail naming `path`.
int64_t yaml_int(const YamlDoc& doc, const YAML::Node& node, const std::string& path,
                 const YAML::Mark& mark);
double yaml_double(const YamlDoc& doc, const YAML::Node& node, const std::string& path,
                   const YAML::Mark& mark);
std::string yaml_string(const YamlDoc& doc, const YAML::Node& node, const std::string& path,
                        const YAML::Mark& mark);

// How a value is shown in messages: "\"-3\"" for scalars, "null", "a list", "a map".
std::string describe_yaml(const YAML::Node& node);

// The node's own mark, or `fallback` when it has none worth showing (null or synthetic nodes).
YAML::Mark mark_or(const YAML::Node& node, const YAML::Mark& fallback);


}  // namespace spmd
