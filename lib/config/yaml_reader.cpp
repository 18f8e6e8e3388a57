// YAML document + overrides with error locations, and the strict map reader (see yaml_reader.h).
#include "config/yaml_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "util/error.h"

namespace spmd {
namespace {

std::string mark_text(const std::string& name, const YAML::Mark& mark) {
  if (mark.is_null()) return name;
  return fmt::format("{}:{}:{}", name, mark.line + 1, mark.column + 1);  // yaml-cpp is 0-based
}

// True when `path` is `prefix` or lies under it ("model" covers "model.n_layer").
bool covers(const std::string& prefix, const std::string& path) {
  if (path.size() < prefix.size() || path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[';
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool is_key_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

std::string join(const std::vector<std::string>& items) {
  return fmt::format("{}", fmt::join(items, ", "));
}

}  // namespace

// ---------------------------------------------------------------------------------- YamlDoc

YamlDoc::YamlDoc(const std::string& text, std::string name) : name_(std::move(name)) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    throw UsageError(fmt::format("{}: YAML syntax error: {}", mark_text(name_, e.mark), e.msg));
  }
  if (docs.size() > 1)
    fail("", docs[1].Mark(), fmt::format("expected one YAML document, found {}", docs.size()));
  // An empty file is a valid config: every value keeps its default.
  if (docs.empty() || docs[0].IsNull()) {
    root_.reset(YAML::Node(YAML::NodeType::Map));
  } else {
    root_.reset(docs[0]);
  }
  if (!root_.IsMap())
    fail("", root_.Mark(), "expected a map of sections (mesh, model, train, ...), got " +
                               describe_yaml(root_));
}

void YamlDoc::apply_override(const std::string& spec) {
  const std::string origin = "--set " + spec;
  const size_t eq = spec.find('=');
  if (eq == std::string::npos)
    throw UsageError(fmt::format("{}: expected KEY=VALUE, e.g. --set model.n_layer=6", origin));
  const std::string key = trim(spec.substr(0, eq));
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    size_t dot = key.find('.', begin);
    parts.push_back(key.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin));
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  for (const auto& part : parts) {
    if (!is_key_name(part))
      throw UsageError(fmt::format("{}: invalid key '{}': expected dotted names, e.g. model.n_layer",
                                   origin, key));
  }
  YAML::Node value;
  try {
    value = YAML::Load(spec.substr(eq + 1));
  } catch (const YAML::ParserException& e) {
    throw UsageError(fmt::format("{}: {}: invalid YAML value: {}", origin, key, e.msg));
  }

  // Walk down the maps, creating missing ones; they belong to this override for messages.
  YAML::Node cur;
  cur.reset(root_);  // reset, not '=': assigning a Node would overwrite what it refers to
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path += (i ? "." : "") + parts[i];
    const YAML::Node existing = static_cast<const YAML::Node&>(cur)[parts[i]];  // no insertion
    if (!existing.IsDefined() || existing.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      overrides_.emplace_back(path, origin);
    } else if (!existing.IsMap()) {
      throw UsageError(fmt::format("{}: cannot set {}: {} is {}, not a map", origin, key, path,
                                   describe_yaml(existing)));
    }
    YAML::Node next = cur[parts[i]];  // exists now
    cur.reset(next);
  }
  // Replace the map entry, not the node it holds: assigning to cur[key] would write through that
  // node into every alias of it (steps: &n 2000, decay_steps: *n would both change).
  cur.remove(parts.back());
  cur[parts.back()] = value;
  overrides_.emplace_back(key, origin);
}

std::string YamlDoc::where(const std::string& path, const YAML::Mark& mark) const {
  // The latest override covering `path` replaced whatever the file (or earlier ones) said.
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it) {
    if (!path.empty() && covers(it->first, path)) return it->second;
  }
  return mark_text(name_, mark);
}

void YamlDoc::fail(const std::string& path, const YAML::Mark& mark,
                   const std::string& message) const {
  if (path.empty()) throw UsageError(fmt::format("{}: {}", where(path, mark), message));
  throw UsageError(fmt::format("{}: {}: {}", where(path, mark), path, message));
}

// -------------------------------------------------------------------------------- MapReader

MapReader::MapReader(const YamlDoc& doc, const YAML::Node& node, std::string map_path,
                     std::vector<std::string> valid_keys, const YAML::Mark& mark)
    : doc_(doc), path_(std::move(map_path)), mark_(mark_or(node, mark)) {
  if (!node.IsDefined() || node.IsNull()) return;
  if (!node.IsMap())
    doc_.fail(path_, mark_,
              fmt::format("expected a map with keys {}; got {}", join(valid_keys),
                          describe_yaml(node)));
  for (const auto& kv : node) {
    const YAML::Node& key_node = kv.first;
    if (!key_node.IsScalar())
      doc_.fail(path_, mark_or(key_node, mark_),
                "keys must be plain names, got " + describe_yaml(key_node));
    const std::string key = key_node.Scalar();
    const YAML::Mark key_mark = mark_or(key_node, mark_);
    if (const Entry* first = find(key))
      doc_.fail(path(key), key_mark,
                fmt::format("duplicate key (first given at line {})",
                            first->key_node.Mark().line + 1));
    if (std::find(valid_keys.begin(), valid_keys.end(), key) == valid_keys.end())
      doc_.fail(path(key), key_mark,
                fmt::format("unknown key '{}'{}; valid keys{}: {}", key,
                            did_you_mean(key, valid_keys),
                            path_.empty() ? "" : " in " + path_, join(valid_keys)));
    entries_.push_back({key, key_node, kv.second});
  }
}

MapReader MapReader::section(const std::string& key, std::vector<std::string> valid_keys) const {
  return MapReader(doc_, get(key), path(key), std::move(valid_keys), mark(key));
}

const MapReader::Entry* MapReader::find(const std::string& key) const {
  for (const auto& e : entries_)
    if (e.key == key) return &e;
  return nullptr;
}

bool MapReader::has(const std::string& key) const { return find(key) != nullptr; }

YAML::Node MapReader::get(const std::string& key) const {
  const Entry* e = find(key);
  return e ? e->value : YAML::Node(YAML::NodeType::Undefined);
}

std::string MapReader::path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

YAML::Mark MapReader::mark(const std::string& key) const {
  const Entry* e = find(key);
  if (!e) return mark_;
  // An empty value ("key:") has no useful mark of its own; point at the key instead.
  return mark_or(e->value, mark_or(e->key_node, mark_));
}

void MapReader::read(const std::string& key, int64_t& out) const {
  if (has(key)) out = yaml_int(doc_, get(key), path(key), mark(key));
}

void MapReader::read(const std::string& key, double& out) const {
  if (has(key)) out = yaml_double(doc_, get(key), path(key), mark(key));
}

void MapReader::read(const std::string& key, bool& out) const {
  if (!has(key)) return;
  const YAML::Node node = get(key);
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, out))
    fail(key, "expected true or false, got " + describe_yaml(node));
}

void MapReader::read(const std::string& key, std::string& out) const {
  if (has(key)) out = yaml_string(doc_, get(key), path(key), mark(key));
}

void MapReader::read(const std::string& key, std::vector<int64_t>& out) const {
  if (!has(key)) return;
  const YAML::Node node = get(key);
  if (!node.IsSequence()) fail(key, "expected a list of integers, got " + describe_yaml(node));
  std::vector<int64_t> values;
  for (size_t i = 0; i < node.size(); ++i)
    values.push_back(yaml_int(doc_, node[i], item_path(key, i), item_mark(key, i)));
  out = std::move(values);
}

void MapReader::read(const std::string& key, std::vector<std::string>& out) const {
  if (!has(key)) return;
  const YAML::Node node = get(key);
  if (!node.IsSequence()) fail(key, "expected a list of names, got " + describe_yaml(node));
  std::vector<std::string> values;
  for (size_t i = 0; i < node.size(); ++i)
    values.push_back(yaml_string(doc_, node[i], item_path(key, i), item_mark(key, i)));
  out = std::move(values);
}

std::string MapReader::item_path(const std::string& key, size_t index) const {
  return fmt::format("{}[{}]", path(key), index);
}

YAML::Mark MapReader::item_mark(const std::string& key, size_t index) const {
  const YAML::Node node = get(key);
  if (!node.IsSequence() || index >= node.size()) return mark(key);
  return mark_or(node[index], mark(key));
}

void MapReader::check(const std::string& key, bool ok, const std::string& expected) const {
  if (ok) return;
  if (has(key)) fail(key, expected + ", got " + describe_yaml(get(key)));
  fail(key, expected);
}

void MapReader::check_item(const std::string& key, size_t index, bool ok,
                           const std::string& expected) const {
  if (ok) return;
  const YAML::Node node = get(key);
  std::string got;
  if (node.IsSequence() && index < node.size()) got = ", got " + describe_yaml(node[index]);
  doc_.fail(item_path(key, index), item_mark(key, index), expected + got);
}

void MapReader::fail(const std::string& key, const std::string& message) const {
  doc_.fail(path(key), mark(key), message);
}

// ------------------------------------------------------------------------------ conversions

std::optional<int64_t> parse_int(const std::string& text) {
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;  // from_chars rejects an explicit '+'
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end) return std::nullopt;
  return value;
}

int64_t yaml_int(const YamlDoc& doc, const YAML::Node& node, const std::string& path,
                 const YAML::Mark& mark) {
  std::optional<int64_t> value;
  if (node.IsScalar()) value = parse_int(node.Scalar());
  if (!value) doc.fail(path, mark, "expected an integer, got " + describe_yaml(node));
  return *value;
}

double yaml_double(const YamlDoc& doc, const YAML::Node& node, const std::string& path,
                   const YAML::Mark& mark) {
  if (node.IsScalar() && !node.Scalar().empty()) {
    const std::string& text = node.Scalar();
    char* end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() + text.size() && !std::isspace(static_cast<unsigned char>(text[0]))) {
      if (!std::isfinite(value))
        doc.fail(path, mark, "expected a finite number, got " + describe_yaml(node));
      return value;
    }
  }
  doc.fail(path, mark, "expected a number, got " + describe_yaml(node));
}

std::string yaml_string(const YamlDoc& doc, const YAML::Node& node, const std::string& path,
                        const YAML::Mark& mark) {
  if (node.IsNull()) return "";
  if (!node.IsScalar()) doc.fail(path, mark, "expected a string, got " + describe_yaml(node));
  return node.Scalar();
}

std::string describe_yaml(const YAML::Node& node) {
  if (!node.IsDefined()) return "nothing";
  switch (node.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: return "\"" + node.Scalar() + "\"";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing";
  }
}

YAML::Mark mark_or(const YAML::Node& node, const YAML::Mark& fallback) {
  if (!node.IsDefined() || node.IsNull() || node.Mark().is_null()) return fallback;
  return node.Mark();
}

}  // namespace spmd
