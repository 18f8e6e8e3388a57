// A small deterministic fuzz pass over the inputs a user hands us: YAML configs and `--set`
// overrides (through parse_config -> plan_layout -> inspect_text + inspect_json, what spmd-inspect
// does) and token files (through TokenDataset::open -> DataLoader -> eval_batch). Built with
// AddressSanitizer + UBSan (tests/fuzz/CMakeLists.txt), so a crash, an overflow or a leak fails
// the test even where the outcome looks fine. The only acceptable outcomes are success and the
// project's own errors with a useful message; anything else is recorded and reported.
//
// Determinism: std::mt19937_64's output sequence is fixed by the standard and only its raw
// integers are used (no <random> distributions, which are implementation-defined), so every run
// on every platform produces the same inputs; a failure report names the case number to replay.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "eval/choice_task.h"
#include "inspect/report.h"
#include "parallel/layout.h"
#include "plan/machine_rates.h"
#include "prepare/prepare.h"
#include "fuzz_support.h"
#include "test_support.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/bpe_train.h"
#include "util/error.h"

namespace {

namespace fs = std::filesystem;
using spmd::test::TempDir;
using spmd::test::write_file;
using namespace spmd::fuzz;
// Printable excerpt of an input for failure messages.
std::string excerpt(const std::string& s, size_t max = 300) {
  std::string out;
  for (char c : s.substr(0, max)) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '\n') out += "\\n";
    else if (u < 0x20 || u >= 0x7f) out += fmt::format("\\x{:02x}", u);
    else out += c;
  }
  if (s.size() > max) out += fmt::format("...({} bytes)", s.size());
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t nl = text.find('\n', begin);
    if (nl == std::string::npos) nl = text.size();
    lines.push_back(text.substr(begin, nl - begin));
    begin = nl + 1;
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// ------------------------------------------------------------------------------- config fuzz

// Numbers that break naive arithmetic or parsing.
const std::vector<std::string> kExtremeNumbers = {
    "0", "-0", "-1", "1", "2", "3", "7", "12", "64", "65535", "65536", "2147483647", "2147483648",
    "-2147483649", "4294967296", "3037000500", "1099511627776", "4611686018427387904",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "99999999999999999999999", "1e308", "-1e308", "1e309", "1e-320", "4.9e-324", ".nan", "NaN",
    "nan", ".inf", "-.inf", "inf", "0x7fffffffffffffff", "0x1p3", "0o17", "1_000", "1.5", "+4",
    "00012", "1e3", "0.999999999999999999", "1.0", "-0.0", "1e-9"};

// Ordinary sizes: mutants that stay valid configs and get as far as the planner and the report.
const std::vector<std::string> kPlausibleNumbers = {"1",  "2",  "3",   "4",   "5",   "6",    "8",
                                                    "12", "16", "32",  "64",  "96",  "128",  "256",
                                                    "384", "512", "1024", "0.5", "0.0", "0.1", "100"};

// Values of the wrong type or odd YAML.
const std::vector<std::string> kWeirdValues = {
    "", "null", "~", "true", "false", "yes", "[]", "{}", "[1, 2]", "[[1]]", "{a: 1}", "\"\"",
    "\"text\"", "'x'", "abc", "auto", "data", "model", "fsdp", "[data, model]", "[batch, data]",
    "[model, model]", "&anc 1", "*anc", "!!int 3", "!!str 5", "!!binary aGVsbG8=", "!custom 4",
    "|\n  block", ">\n  folded", "? complex\n: key", "\"\\u0000\"", "\"\\xff\"", "- item",
    "'unterminated", "\"unterminated", "{unclosed", "[unclosed", "#comment", "%TAG", "@reserved",
    "`tick`", "\t", "<<: *anc", "[null]", "[~, data]", "[1, [2, [3]]]", "\"a\\nb\"", "x: y: z",
    "\xc3\xa9t\xc3\xa9", "\xff\xfe", "datasets/x.bin", "/", "a,b", "}", "]", "*"};

const std::vector<std::string> kSpecialChars = {":", "[", "]", "{", "}", "-", "#", " ", "\n",
                                                "\t", "\"", "'", "&", "*", "!", "|", ">", "%",
                                                "@", "`", ",", "?", std::string(1, '\0'),
                                                "\xff", "\xc3", "\r", "\\"};

// Every key of the schema (short names) and some near misses.
const std::vector<std::string> kKeyNames = {
    "mesh", "shape", "axes", "sharding_rules", "model", "vocab_size", "block_size", "n_layer",
    "n_head", "n_embd", "dropout", "bias", "data", "train", "val", "batch_size", "window_stride", "steps",
    "decay_steps", "seed", "lr", "min_lr", "warmup_steps", "weight_decay", "beta1", "beta2",
    "grad_clip", "eval_every", "eval_batches", "log_every", "skip_nonfinite", "microbatches", "checkpoint", "dir",
    "every", "keep", "output", "runtime", "backend", "device", "threads_per_rank", "timeout_s", "grad_bucket_mb",
    "fsdp_prefetch", "pipeline_schedule", "pipeline_layers", "layers", "lr_schedule", "decay_shape", "sources",
    "name", "path", "weight"};

const std::vector<std::string> kOverrideKeys = {
    "mesh.shape", "mesh.axes", "sharding_rules", "model.vocab_size", "model.block_size",
    "model.n_layer", "model.n_head", "model.n_embd", "model.dropout", "model.bias", "data.train",
    "data.val", "data.batch_size", "data.window_stride", "train.steps", "train.decay_steps", "train.seed", "train.lr",
    "train.min_lr", "train.warmup_steps", "train.weight_decay", "train.beta1", "train.beta2",
    "train.grad_clip", "train.eval_every", "train.eval_batches", "train.log_every",
    "train.skip_nonfinite", "train.microbatches", "checkpoint.dir", "checkpoint.every", "checkpoint.keep", "output.dir",
    "runtime.backend", "runtime.device", "runtime.threads_per_rank", "runtime.timeout_s", "runtime.grad_bucket_mb",
    "runtime.fsdp_prefetch", "runtime.pipeline_schedule", "runtime.pipeline_layers", "train.lr_schedule",
    "train.decay_shape", "data.sources",
    // not in the schema, or not a valid dotted key
    "mesh", "model", "train", "bogus", "model.bogus", "model.n_layers", "model.n_layer.x",
    "sharding_rules.batch", "a..b", "", " model . n_layer ", "mesh.shape.0", "x.y.z.w",
    "model-n_layer", "m\xc3\xbc", ".model", "model.", "runtime.backend.gloo"};

const std::vector<std::string> kListValues = {
    "[1]", "[2, 2]", "[8]", "[3, 5]", "[1, 1, 1]", "[0]", "[-1, 2]", "[2147483648, 2]",
    "[4294967296, 4294967296]", "[data]", "[data, model]", "[a, a]", "[data, '']",
    "[[batch, data], [vocab, model]]", "[[batch, data], [heads, null]]", "[[batch]]",
    "[[batch, data, model]]", "[[embed, [data, model]]]", "[[mlp, nope]]", "[[layers, model]]", "[[layers, data]]"};

const std::vector<std::string> kShowParams = {"wte", "wpe", "h.0.mlp.c_fc.weight",
                                              "h.0.attn.c_attn.weight", "ln_f.weight", "nope",
                                              "h.0.attn.c_proj.bias", ""};

// Positions where a number token starts and its length.
std::vector<std::pair<size_t, size_t>> number_tokens(const std::string& s) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < s.size();) {
    bool start = std::isdigit(static_cast<unsigned char>(s[i])) &&
                 (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])));
    if (!start) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.' ||
                            s[j] == 'e' || s[j] == 'E' || s[j] == '-' || s[j] == '_'))
      ++j;
    size_t begin = (i > 0 && s[i - 1] == '-') ? i - 1 : i;
    out.emplace_back(begin, j - begin);
    i = j;
  }
  return out;
}

// The span of the value after "key:" at `key_end` (just past the ':'): a bracketed flow
// collection, or a plain scalar up to ',', '}' or the end of the line.
std::pair<size_t, size_t> value_span(const std::string& s, size_t key_end) {
  size_t b = key_end;
  while (b < s.size() && s[b] == ' ') ++b;
  if (b < s.size() && (s[b] == '[' || s[b] == '{')) {
    int depth = 0;
    for (size_t e = b; e < s.size(); ++e) {
      if (s[e] == '[' || s[e] == '{') ++depth;
      if (s[e] == ']' || s[e] == '}') {
        if (--depth == 0) return {b, e + 1 - b};
      }
      if (s[e] == '\n' && depth == 0) break;
    }
    return {b, 1};
  }
  size_t e = b;
  while (e < s.size() && s[e] != ',' && s[e] != '}' && s[e] != '\n') ++e;
  return {b, e - b};
}

std::string huge_list(Rng& rng) {
  static const std::vector<std::string> items = {"1", "2", "0", "data", "[batch, data]", "null",
                                                 "-1", "9223372036854775807", "[x, null]", "a"};
  static const std::vector<size_t> sizes = {50, 200, 1000, 5000, 20000};
  size_t n = rng.pick(sizes);
  const std::string& item = rng.pick(items);
  bool distinct = rng.percent(30);  // distinct names: [a0, a1, ...] or [[r0, null], ...]
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    if (distinct) out += rng.percent(50) ? fmt::format("a{}", i) : fmt::format("[r{}, null]", i);
    else out += item;
  }
  return out + "]";
}

std::string deep_nesting(Rng& rng) {
  static const std::vector<size_t> depths = {10, 100, 500, 1999, 2000, 2001, 5000, 20000};
  size_t d = rng.pick(depths);
  switch (rng.below(4)) {
    case 0: return std::string(d, '[') + "1" + std::string(d, ']');
    case 1: {
      std::string s;
      for (size_t i = 0; i < d; ++i) s += "{a: ";
      return s + "1" + std::string(d, '}');
    }
    case 2: return std::string(d, '[');  // never closed
    default: {
      std::string s;  // block-style nesting by indentation
      for (size_t i = 0; i < std::min<size_t>(d, 300); ++i) s += "\n" + std::string(i + 2, ' ') + "k:";
      return s + " 1";
    }
  }
}

// One random edit of `text`; `seeds` are the other files to splice from. `gentle` picks only edits
// that keep the YAML well-formed (numbers, sharding rules), so that the mutant reaches the planner.
void mutate_once(std::string& text, Rng& rng, const std::vector<std::string>& seeds, bool gentle) {
  static const std::vector<size_t> gentle_edits = {5, 5, 5, 13};
  switch (gentle ? rng.pick(gentle_edits) : rng.below(16)) {
    case 0: {  // flip a bit or replace a byte with a YAML-significant one
      if (text.empty()) break;
      size_t i = rng.below(text.size());
      if (rng.percent(50)) text[i] = static_cast<char>(text[i] ^ (1 << rng.below(8)));
      else text.replace(i, 1, rng.pick(kSpecialChars));
      break;
    }
    case 1: {  // delete a range
      if (text.empty()) break;
      size_t i = rng.below(text.size());
      size_t n = 1 + rng.below(rng.percent(80) ? 16 : text.size());
      text.erase(i, n);
      break;
    }
    case 2: {  // duplicate a range somewhere else
      if (text.empty()) break;
      size_t i = rng.below(text.size());
      std::string chunk = text.substr(i, 1 + rng.below(80));
      text.insert(rng.below(text.size() + 1), chunk);
      break;
    }
    case 3: {  // splice a line from another seed (replace or insert)
      auto lines = split_lines(text);
      auto other = split_lines(rng.pick(seeds));
      if (other.empty()) break;
      const std::string& line = rng.pick(other);
      if (!lines.empty() && rng.percent(50)) lines[rng.below(lines.size())] = line;
      else lines.insert(lines.begin() + static_cast<long>(rng.below(lines.size() + 1)), line);
      text = join_lines(lines);
      break;
    }
    case 4: {  // swap or drop whole lines
      auto lines = split_lines(text);
      if (lines.size() < 2) break;
      size_t a = rng.below(lines.size()), b = rng.below(lines.size());
      if (rng.percent(50)) std::swap(lines[a], lines[b]);
      else lines.erase(lines.begin() + static_cast<long>(a));
      text = join_lines(lines);
      break;
    }
    case 5:
    case 6:
    case 7: {  // replace a number with an extreme one (the most productive mutation)
      auto nums = number_tokens(text);
      if (nums.empty()) break;
      auto [pos, len] = rng.pick(nums);
      text.replace(pos, len, rng.percent(50) ? rng.pick(kPlausibleNumbers) : rng.pick(kExtremeNumbers));
      break;
    }
    case 8:
    case 9: {  // replace the value of a schema key with something odd
      const std::string key = rng.pick(kKeyNames) + ":";
      std::vector<size_t> hits;
      for (size_t p = text.find(key); p != std::string::npos; p = text.find(key, p + 1)) hits.push_back(p);
      if (hits.empty()) break;
      auto [b, n] = value_span(text, rng.pick(hits) + key.size());
      std::string value;
      switch (rng.below(5)) {
        case 0: value = rng.pick(kExtremeNumbers); break;
        case 1: value = rng.pick(kListValues); break;
        case 2: value = huge_list(rng); break;
        case 3: value = rng.percent(20) ? deep_nesting(rng) : rng.pick(kWeirdValues); break;
        default: value = rng.pick(kWeirdValues); break;
      }
      text.replace(b, n, value);
      break;
    }
    case 10: {  // unknown or misspelled keys
      static const std::vector<std::string> keys = {"bogus: 1", "n_layers: 4", "vocab: 65",
                                                    "batchsize: 8", "Model: {}", "mesh: {}",
                                                    "model: {n_layer: 2}", "\"\": 1", "? [a]\n: 1",
                                                    "1: 2", "null: 3", "~: x"};
      auto lines = split_lines(text);
      std::string k = rng.pick(keys);
      if (rng.percent(50)) {
        size_t brace = text.find('{', rng.below(text.size() + 1));
        if (brace != std::string::npos) {
          text.insert(brace + 1, k.substr(0, k.find('\n')) + ", ");
          break;
        }
      }
      lines.insert(lines.begin() + static_cast<long>(rng.below(lines.size() + 1)), k);
      text = join_lines(lines);
      break;
    }
    case 11: {  // deep nesting or a huge list as a whole section
      static const std::vector<std::string> sections = {"mesh", "sharding_rules", "model", "train",
                                                        "runtime", "data"};
      text += rng.pick(sections) + ": " + (rng.percent(50) ? deep_nesting(rng) : huge_list(rng)) + "\n";
      break;
    }
    case 12: {  // document markers, directives, anchors and aliases
      static const std::vector<std::string> bits = {"---\n", "...\n", "--- !!map\n", "%YAML 1.2\n---\n",
                                                    "&root\n", "base: &b {vocab_size: 65}\n",
                                                    "model: *b\n", "model: {<<: *b}\n", "*undefined\n",
                                                    "--- |\n  text\n", "\xef\xbb\xbf"};
      const std::string& bit = rng.pick(bits);
      if (rng.percent(50)) text = bit + text;
      else text += bit;
      break;
    }
    case 13: {  // sharding rule edits
      static const std::vector<std::string> rules = {
          "  - [embed, data]", "  - [batch, model]", "  - [vocab, [data, model]]",
          "  - [heads, [model, data]]", "  - [kv, model]", "  - [seq, model]", "  - [mlp, data]",
          "  - [batch, [data, data]]", "  - [batch]", "  - []", "  - [batch, data, model]",
          "  - [[batch], data]", "  - [\"\", data]", "  - [unknown_logical, data]",
          "  - [batch, nope]", "  - [embed, fsdp]", "  - batch", "  - {batch: data}",
          "  - [layers, model]", "  - [layers, data]", "  - [layers, [data, model]]", "  - [layers, null]"};
      auto lines = split_lines(text);
      size_t at = lines.size();
      for (size_t i = 0; i < lines.size(); ++i)
        if (lines[i].rfind("sharding_rules:", 0) == 0) at = i + 1;
      lines.insert(lines.begin() + static_cast<long>(std::min(at + rng.below(8), lines.size())),
                   rng.pick(rules));
      text = join_lines(lines);
      break;
    }
    case 14: {  // random garbage, rarely the whole file
      std::string junk;
      size_t n = 1 + rng.below(64);
      for (size_t i = 0; i < n; ++i) junk += static_cast<char>(rng.below(256));
      if (rng.percent(10)) text = junk;
      else text.insert(rng.below(text.size() + 1), junk);
      break;
    }
    default: {  // truncate
      text.resize(rng.below(text.size() + 1));
      break;
    }
  }
}

std::vector<std::string> random_overrides(Rng& rng) {
  std::vector<std::string> out;
  size_t n = rng.percent(40) ? 1 + rng.below(4) : 0;
  for (size_t i = 0; i < n; ++i) {
    if (rng.percent(5)) {
      static const std::vector<std::string> odd = {"", "=", "noequals", "model.n_layer", "==",
                                                   "=1", "model.n_layer==2", "model.n_layer=[",
                                                   "model.n_layer=: x"};
      out.push_back(rng.pick(odd));
      continue;
    }
    std::string value;
    switch (rng.below(4)) {
      case 0: value = rng.pick(kExtremeNumbers); break;
      case 1: value = rng.pick(kWeirdValues); break;
      case 2: value = rng.percent(10) ? huge_list(rng) : rng.pick(kListValues); break;
      default: value = rng.percent(5) ? deep_nesting(rng) : rng.pick(kPlausibleNumbers); break;
    }
    out.push_back(rng.pick(kOverrideKeys) + "=" + value);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> seed_configs() {
  std::vector<std::pair<std::string, std::string>> seeds;
  for (const char* dir : {"configs", "configs/bench"}) {
    std::vector<std::string> paths;
    for (const auto& e : fs::directory_iterator(spmd::test::source_path(dir)))
      if (e.path().extension() == ".yaml") paths.push_back(e.path().string());
    std::sort(paths.begin(), paths.end());
    for (const auto& p : paths) seeds.emplace_back(p, spmd::test::read_file(p));
  }
  return seeds;
}

// Sanity of a successful report: byte counts are non-negative and add up.
void check_report(const nlohmann::json& j, const std::string& label, Tally& tally) {
  const auto& totals = j.at("totals");
  for (const char* which : {"per_device", "single_device"}) {
    const auto& m = totals.at(which);
    int64_t sum = 0;
    for (const char* k : {"params", "grads", "optimizer", "fsdp_gathered", "gradient_sends",
                          "backward_working_set", "recompute", "activations"}) {
      int64_t v = m.at(k).get<int64_t>();
      if (v < 0) tally.fail(fmt::format("{}: negative {}.{} = {}", label, which, k, v));
      sum += v;
    }
    if (sum != m.at("total").get<int64_t>())
      tally.fail(fmt::format("{}: {}.total {} != sum {}", label, which, m.at("total").dump(), sum));
  }
  if (totals.at("param_bytes_global").get<int64_t>() < totals.at("param_bytes_per_device").get<int64_t>())
    tally.fail(label + ": per-device parameter bytes exceed the global ones");
}

// What spmd-inspect does, end to end; returns the outcome name ("ok", "usage_error@stage").
std::string inspect_case(const std::string& text, const std::string& name,
                         const std::vector<std::string>& overrides,
                         const std::vector<std::string>& show, const std::string& label,
                         Tally& tally) {
  std::string stage = "parse";
  try {
    spmd::Config config = spmd::parse_config(text, name, overrides);
    stage = "plan_layout";
    spmd::ModelLayout layout = spmd::plan_layout(config);
    stage = "inspect";
    std::string report = spmd::inspect_text(config, layout, {});
    nlohmann::json j = spmd::inspect_json(config, layout);
    std::string dumped = j.dump(2);
    if (report.empty() || dumped.empty()) tally.fail(label + ": empty report");
    check_report(j, label, tally);
    // resolved_yaml must read back as the same config (it goes into logs and checkpoints).
    stage = "resolved_yaml round trip";
    spmd::Config again = spmd::parse_config(config.resolved_yaml, name + " (resolved)");
    if (again.resolved_yaml != config.resolved_yaml)
      tally.fail(fmt::format("{}: resolved_yaml does not round-trip:\n{}\n---\n{}", label,
                             config.resolved_yaml, again.resolved_yaml));
    if (!show.empty()) {
      stage = "inspect --show";
      spmd::inspect_text(config, layout, spmd::InspectTextOptions{show, false, std::nullopt});
    }
    return "ok";
  } catch (const spmd::UsageError& e) {
    if (verbose()) fmt::print("[fuzz] {}\n[fuzz]   -> {}\n", label, e.what());
    if (std::string(e.what()).empty()) tally.fail(label + ": UsageError with an empty message");
    if (stage == "resolved_yaml round trip")
      tally.fail(fmt::format("{}: resolved_yaml does not parse back: {}", label, e.what()));
    return "usage_error@" + stage;
  } catch (const std::exception& e) {
    tally.fail(fmt::format("{}: {} at {}: {}", label, typeid(e).name(), stage, e.what()));
    return "WRONG_EXCEPTION@" + stage;
  } catch (...) {
    tally.fail(fmt::format("{}: non-std exception at {}", label, stage));
    return "WRONG_EXCEPTION@" + stage;
  }
}

// ---------------------------------------------------------------------------- token-file fuzz

std::string le32(int32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}

std::string llmc_header(int32_t magic, int32_t version, int32_t count) {
  std::string h = le32(magic) + le32(version) + le32(count);
  h.resize(spmd::kLlmCHeaderBytes, '\0');
  return h;
}

// n ids below vocab_hint at `width`, little-endian.
std::string token_bytes(Rng& rng, size_t n, int64_t vocab_hint, spmd::TokenWidth width) {
  const size_t bytes = spmd::bytes_per_token(width);
  const auto below = static_cast<size_t>(std::min(vocab_hint, spmd::max_token_id(width) + 1));
  std::string out(n * bytes, '\0');
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<uint32_t>(rng.below(below));
    std::memcpy(out.data() + i * bytes, &id, bytes);  // the low bytes: little-endian
  }
  return out;
}

// One token file's bytes: a valid nanoGPT or llm.c file of uint16 or uint32 ids, then a few
// corruptions (of a uint32 file's ids too).
std::string random_token_file(Rng& rng, int64_t vocab_hint, spmd::TokenWidth width, bool llmc) {
  static const std::vector<size_t> counts = {0, 1, 2, 3, 8, 9, 63, 64, 65, 129, 500, 1000, 4097};
  static const std::vector<int32_t> magics = {0, 1, -1, 20240519, 20240521, 20240520, 20240801, 20240802, -20240520,
                                              2147483647};
  static const std::vector<int32_t> versions = {0, 1, 2, 7, 8, -1, 3, 2147483647, -2147483647 - 1};
  static const std::vector<uint32_t> bad_ids = {0, 1, 64, 112, 113, 114, 255, 256, 65534, 65535, 65536, 100000,
                                                128255, 128256, 2147483647u, 2147483648u, 4294967295u};
  size_t n = rng.pick(counts);
  std::string bytes = llmc ? llmc_header(spmd::llmc_magic(width), spmd::llmc_version(width), static_cast<int32_t>(n))
                           : "";
  bytes += token_bytes(rng, n, vocab_hint, width);
  const size_t header = llmc ? spmd::kLlmCHeaderBytes : 0;
  const size_t id_bytes = spmd::bytes_per_token(width);

  size_t edits = rng.percent(35) ? 0 : 1 + rng.below(3);
  for (size_t e = 0; e < edits; ++e) {
    switch (rng.below(11)) {
      case 0: bytes.resize(rng.below(bytes.size() + 1)); break;                  // truncate
      case 1: bytes += static_cast<char>(rng.below(256)); break;                 // odd size
      case 2:
        if (bytes.size() >= 4) std::memcpy(bytes.data(), le32(rng.pick(magics)).data(), 4);
        break;
      case 3:
        if (bytes.size() >= 8) std::memcpy(bytes.data() + 4, le32(rng.pick(versions)).data(), 4);
        break;
      case 4: {  // a wrong token count
        static const std::vector<int64_t> deltas = {-1, 1, 2, -2};
        int32_t c = static_cast<int32_t>(n);
        switch (rng.below(4)) {
          case 0: c = static_cast<int32_t>(n + rng.pick(deltas)); break;
          case 1: c = 2147483647; break;
          case 2: c = -2147483647 - 1; break;
          default: c = static_cast<int32_t>(rng.next()); break;
        }
        if (bytes.size() >= 12) std::memcpy(bytes.data() + 8, le32(c).data(), 4);
        break;
      }
      case 5: {  // a token id at or above the vocabulary (its low bytes for uint16)
        if (bytes.size() < header + id_bytes) break;
        size_t i = header + id_bytes * rng.below((bytes.size() - header) / id_bytes);
        uint32_t v = rng.pick(bad_ids);
        std::memcpy(bytes.data() + i, &v, id_bytes);
        break;
      }
      case 6:  // a byte flip anywhere (the header included)
        if (!bytes.empty()) bytes[rng.below(bytes.size())] ^= static_cast<char>(1 << rng.below(8));
        break;
      case 7:  // the shape of an llm.c header with some other magic, on any file
        bytes = llmc_header(rng.pick(magics) == 0 ? 7 : rng.pick(magics), rng.percent(50) ? 1 : 7, 5) +
                bytes.substr(std::min(bytes.size(), header));
        break;
      case 8: bytes.clear(); break;
      case 9: bytes = bytes.substr(0, std::min<size_t>(bytes.size(), 4)); break;  // a bare magic
      default: {  // a nonzero word inside the header's zero area
        if (bytes.size() < spmd::kLlmCHeaderBytes) break;
        size_t w = 3 + rng.below(253);
        std::memcpy(bytes.data() + 4 * w, le32(static_cast<int32_t>(1 + rng.below(1000))).data(), 4);
        break;
      }
    }
  }
  return bytes;
}

struct TokenCase {
  std::string spec;          // what TokenDataset::open gets
  std::string description;
};

// A meta.json beside token files: mostly the dtype they were written with, sometimes another,
// a wrong one, none, or no JSON at all.
void write_random_meta(Rng& rng, const std::string& dir, spmd::TokenWidth width) {
  static const std::vector<std::string> others = {
      "{}", R"({"dtype": "uint16"})", R"({"dtype": "uint32"})", R"({"dtype": "int64"})", R"({"dtype": 4})",
      R"({"dtype": null})", R"(["dtype", "uint32"])", R"({"dtype": "uint32")", "", "\xff\xfe"};
  write_file(dir + "/meta.json", rng.percent(70) ? fmt::format(R"({{"dtype": "{}"}})", spmd::dtype_name(width))
                                                 : rng.pick(others));
}

spmd::TokenWidth random_width(Rng& rng) { return rng.percent(35) ? spmd::TokenWidth::kU32 : spmd::TokenWidth::kU16; }

// Builds case `index` under `dir` (a fresh directory): one file, a directory of shards (with
// distractors), a glob, or one of a few special specs. Files are uint16 or uint32, nanoGPT
// (uint32 ones with a meta.json that says so, mostly) or llm.c.
TokenCase make_token_case(Rng& rng, const std::string& dir, int64_t vocab_hint) {
  switch (rng.below(10)) {
    case 0:
    case 1:
    case 2:
    case 3: {
      std::string path = dir + "/tokens.bin";
      const spmd::TokenWidth width = random_width(rng);
      const bool llmc = rng.percent(45);
      write_file(path, random_token_file(rng, vocab_hint, width, llmc));
      if ((width == spmd::TokenWidth::kU32 && !llmc) ? rng.percent(85) : rng.percent(15))
        write_random_meta(rng, dir, width);
      return {path, fmt::format("one {} {} file", llmc ? "llm.c" : "nanoGPT", spmd::dtype_name(width))};
    }
    case 4:
    case 5:
    case 6:
    case 7: {
      std::string shards = dir + "/shards";
      fs::create_directory(shards);
      size_t n = rng.below(5);  // 0 shards: an empty directory
      const spmd::TokenWidth width = random_width(rng);  // mostly one width; sometimes mixed
      for (size_t i = 0; i < n; ++i)
        write_file(fmt::format("{}/shard_{:03}.bin", shards, i),
                   random_token_file(rng, vocab_hint, rng.percent(85) ? width : random_width(rng), rng.percent(60)));
      if (rng.percent(30)) write_file(shards + "/notes.txt", "not tokens");
      if (rng.percent(15)) fs::create_directory(shards + "/subdir.bin");
      if (rng.percent(15)) fs::create_symlink(shards + "/missing.bin", shards + "/dangling.bin");
      if (rng.percent(10)) fs::create_symlink(shards + "/shard_000.bin", shards + "/link.bin");
      if (rng.percent(15)) write_random_meta(rng, shards, width);
      bool glob = rng.percent(35);
      static const std::vector<std::string> patterns = {"/*.bin", "/shard_00[0-1].bin", "/*",
                                                        "/shard_?.bin", "/[", "/*.none"};
      return {glob ? shards + rng.pick(patterns) : shards, glob ? "glob" : "directory"};
    }
    case 8: {  // a spec that names nothing usable
      static const std::vector<std::string> tails = {"/missing.bin", "", "/", "/missing/*.bin", "/."};
      return {dir + rng.pick(tails), "missing/odd path"};
    }
    default: {  // not a regular file: a FIFO (opening it must not block) or a device
      if (rng.percent(50)) {
        std::string fifo = dir + "/pipe.bin";
        REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
        return {fifo, "fifo"};
      }
      return {"/dev/null", "device"};
    }
  }
}

// Runs a dataset through DataLoader and eval_batch; checks what every batch must satisfy.
void exercise_loader(const std::shared_ptr<const spmd::TokenDataset>& data, int64_t vocab, Rng& rng,
                     const std::string& label, Tally& tally) {
  // Block sizes past the file (and past int64 + 1) must be refused, naming the file.
  static const std::vector<int64_t> blocks = {1, 2, 7, 64, 64, 300, 5000, INT64_MAX};
  static const std::vector<int64_t> batches = {1, 2, 3, 8, 12};
  const int64_t T = rng.pick(blocks);
  const int64_t B = rng.pick(batches);
  const int64_t D = (B % 2 == 0 && rng.percent(50)) ? 2 : 1;
  const int64_t d = static_cast<int64_t>(rng.below(static_cast<size_t>(D)));
  const int prefetch = rng.percent(50) ? 0 : 2;
  const int64_t seed = static_cast<int64_t>(rng.next());

  auto check_batch = [&](const spmd::Batch& b, const char* what) {
    if (b.rows != B / D || b.seq != T ||
        b.inputs.size() != static_cast<size_t>(b.rows * T) || b.targets.size() != b.inputs.size())
      tally.fail(fmt::format("{}: {} has the wrong shape", label, what));
    for (size_t i = 0; i < b.inputs.size(); ++i) {
      if (b.inputs[i] < 0 || b.inputs[i] >= vocab || b.targets[i] < 0 || b.targets[i] >= vocab) {
        tally.fail(fmt::format("{}: {} holds token {} outside [0, {})", label, what, b.inputs[i], vocab));
        return;
      }
      if (i % static_cast<size_t>(T) + 1 < static_cast<size_t>(T) && b.targets[i] != b.inputs[i + 1]) {
        tally.fail(fmt::format("{}: {} targets are not the inputs shifted by one", label, what));
        return;
      }
    }
  };

  spmd::DataLoader loader(data, B, T, seed, d, D, prefetch);
  for (int step = 0; step < 3; ++step) check_batch(loader.next(), "a training batch");
  // Resuming from the state must give the batch the running loader gives next.
  spmd::LoaderState state = loader.state();
  spmd::DataLoader resumed(data, B, T, 0, d, D, prefetch == 0 ? 2 : 0);
  resumed.restore(state);
  spmd::Batch a = loader.next(), b = resumed.next();
  if (a.inputs != b.inputs || a.window_ids != b.window_ids)
    tally.fail(label + ": a loader restored from state() reads different rows");
  int64_t k = static_cast<int64_t>(rng.below(6));
  check_batch(spmd::eval_batch(*data, k, B, T, d, D), "an eval batch");
}

bool names_a_file(const std::string& message, const std::string& spec, const std::string& dir) {
  return !message.empty() && (message.find(spec) != std::string::npos ||
                              message.find(dir) != std::string::npos);
}

}  // namespace

// ------------------------------------------------------------------------------------ tests

TEST_CASE("config: mutated YAML and --set overrides through parse_config, plan_layout and the inspect report") {
  const auto seeds = seed_configs();
  REQUIRE(seeds.size() >= 7);
  std::vector<std::string> seed_texts;
  for (const auto& s : seeds) seed_texts.push_back(s.second);

  Tally tally;
  const auto start = Clock::now();
  // The unmutated seeds first: all of them must pass.
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::string outcome = inspect_case(seeds[i].second, seeds[i].first, {}, {"wte"},
                                       "seed " + seeds[i].first, tally);
    CHECK_MESSAGE(outcome == "ok", seeds[i].first);
  }
  constexpr int kCases = 1000;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0xc0ffee00u + static_cast<uint64_t>(i));
    std::string text = rng.pick(seed_texts);
    size_t edits = 1 + rng.below(rng.percent(70) ? 2 : 5);
    if (rng.percent(8)) edits = 0;  // overrides only
    const bool gentle = rng.percent(35);
    for (size_t e = 0; e < edits; ++e) mutate_once(text, rng, seed_texts, gentle);
    std::vector<std::string> overrides = random_overrides(rng);
    if (edits == 0 && overrides.empty()) overrides = {rng.pick(kOverrideKeys) + "=" + rng.pick(kExtremeNumbers)};
    std::vector<std::string> show;
    if (rng.percent(20)) show.push_back(rng.pick(kShowParams));

    std::string label = fmt::format("config case {} (overrides [{}]) text: {}", i,
                                    excerpt(fmt::format("{}", fmt::join(overrides, " | "))),
                                    excerpt(text));
    auto t0 = Clock::now();
    std::string outcome = inspect_case(text, fmt::format("fuzz{}.yaml", i), overrides, show, label, tally);
    tally.record(i, outcome, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  tally.print(fmt::format("configs ({:.1f} s)",
                          std::chrono::duration<double>(Clock::now() - start).count()));
  CHECK(tally.cases == kCases);
  CHECK(tally.failures.empty());
  CHECK(tally.count("ok") > 0);           // some mutants still are valid configs
  CHECK(tally.count("usage_error") > 0);  // and most are refused
}

TEST_CASE("inspect: astronomically large models are refused or estimated without overflow") {
  // Each parses (the numbers are valid int64) and is small enough to plan abstractly; none may
  // allocate per parameter, overflow a size computation or take long.
  const std::string rules = R"(
sharding_rules:
  - [batch, data]
  - [vocab, model]
  - [heads, model]
  - [mlp, model]
  - [embed, null]
  - [seq, null]
  - [kv, null]
)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"huge n_embd", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                          "model: {n_embd: 4611686018427387904, n_head: 1}"},
      {"n_embd near sqrt(2^63)", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                                     "model: {n_embd: 3037000500, n_head: 4}"},
      {"n_embd 2^31", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                          "model: {n_embd: 2147483648, n_head: 8}"},
      {"huge vocab", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                         "model: {vocab_size: 9223372036854775807}"},
      {"huge vocab, padded", "mesh: {shape: [1, 3], axes: [data, model]}" + rules +
                                 "model: {vocab_size: 9223372036854775807, n_head: 3, n_embd: 6}"},
      {"huge block", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                         "model: {block_size: 9223372036854775807}"},
      {"huge batch", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                         "data: {batch_size: 9223372036854775807}"},
      {"huge batch x block", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                                 "model: {block_size: 4294967296}\ndata: {batch_size: 4294967296}"},
      {"huge n_layer", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                           "model: {n_layer: 9223372036854775807}"},
      {"n_layer 2^31", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                           "model: {n_layer: 2147483648}"},
      {"n_layer 100k", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                           "model: {n_layer: 100000, n_embd: 8, n_head: 2}"},
      {"huge n_head", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                          "model: {n_embd: 9223372036854775807, n_head: 9223372036854775807}"},
      {"mesh product overflows", "mesh: {shape: [4294967296, 4294967296], axes: [data, model]}" + rules},
      {"mesh product 2^64", "mesh: {shape: [4294967296, 4294967296, 1], axes: [data, model, x]}" + rules},
      {"huge replicated mesh axis", "mesh: {shape: [1, 4294967296], axes: [data, model]}\n"
                                    "sharding_rules: [[batch, data]]\n"
                                    "model: {vocab_size: 65}"},
      {"large replicated mesh axis", "mesh: {shape: [1, 16777216], axes: [data, x]}" + rules.substr(0, 0) +
                                         "\nsharding_rules: [[batch, data], [vocab, null], [heads, null], "
                                         "[mlp, null], [embed, null], [seq, null], [kv, null]]"},
      {"huge data axis", "mesh: {shape: [9223372036854775807], axes: [data]}\n"
                         "sharding_rules: [[batch, data]]\ndata: {batch_size: 9223372036854775807}"},
      {"many mesh axes", [] {
         std::string shape, axes;
         for (int i = 0; i < 64; ++i) {
           shape += (i ? ", " : "") + std::string("2");
           axes += fmt::format("{}a{}", i ? ", " : "", i);
         }
         return "mesh: {shape: [" + shape + "], axes: [" + axes + "]}\nsharding_rules: [[batch, a0]]";
       }()},
      // Refused since rules must name logical axes the model uses (a typo gets a did-you-mean).
      {"many distinct rules", [] {
         std::string s = "mesh: {shape: [2], axes: [data]}\nsharding_rules:\n  - [batch, data]\n";
         for (int i = 0; i < 5000; ++i) s += fmt::format("  - [name{}, null]\n", i);
         return s + "  - [vocab, null]\n  - [heads, null]\n  - [mlp, null]\n  - [embed, null]\n"
                    "  - [seq, null]\n  - [kv, null]\n";
       }()},
      // Large but within the limits: these plan, and their estimates must not overflow.
      {"wide, one layer", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                              "model: {n_embd: 33554432, n_head: 1, n_layer: 1}"},
      {"wide, tensor parallel", "mesh: {shape: [2, 4], axes: [data, model]}" + rules +
                                    "model: {vocab_size: 1000000007, n_embd: 16777216, n_head: 4, n_layer: 2}"},
      {"long context, max layers", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                                       "model: {block_size: 1048576, n_layer: 1024}"},
      {"big batch", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                        "data: {batch_size: 68719476736}"},
      {"big batch, refused", "mesh: {shape: [1, 1], axes: [data, model]}" + rules +
                                 "data: {batch_size: 1099511627776}"},
      // (Meshes of up to 2^20 devices plan too, but drawing one takes seconds under ASan.)
      {"too many devices", "mesh: {shape: [2, 524289], axes: [data, x]}\n"
                           "sharding_rules: [[batch, data]]"},
      {"65536 devices, replicated", "mesh: {shape: [1, 65536], axes: [data, x]}\n"
                                  "sharding_rules: [[batch, data], [vocab, null], [heads, null], "
                                  "[mlp, null], [embed, null], [seq, null], [kv, null]]"},
      {"65536 devices, fsdp", "mesh: {shape: [65536], axes: [fsdp]}\n"
                            "sharding_rules: [[batch, fsdp], [embed, fsdp], [vocab, null], [heads, null], "
                            "[mlp, null], [seq, null], [kv, null]]\n"
                            "model: {vocab_size: 50257, n_embd: 1048576, n_head: 16, n_layer: 2}\n"
                            "data: {batch_size: 65536}"},
      {"everything at once", "mesh: {shape: [2, 2], axes: [data, model]}" + rules +
                                 "model: {vocab_size: 4611686018427387904, block_size: 4611686018427387904,"
                                 " n_layer: 4611686018427387904, n_head: 2, n_embd: 4611686018427387904}\n"
                                 "data: {batch_size: 4611686018427387904}"},
  };
  Tally tally;
  int index = 0;
  for (const auto& [what, text] : cases) {
    auto t0 = Clock::now();
    std::string outcome = inspect_case(text, what + ".yaml", {}, {"wte"}, what, tally);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    tally.record(index++, outcome, s);
    MESSAGE(fmt::format("{}: {} ({:.3f} s)", what, outcome, s));
  }
  tally.print("large models");
  CHECK(tally.failures.empty());
  CHECK(tally.count("ok") >= 6);           // the large-but-possible ones plan and report
  CHECK(tally.count("usage_error") >= 20);  // the impossible ones are refused up front
}

TEST_CASE("data: mutated token files and shard directories through TokenDataset and DataLoader and eval_batch") {
  static const std::vector<int64_t> vocabs = {113, 113, 113, 65,     1,      2,          255, 65535,
                                              65536, 100000, 128256, 128256, 0, -1, spmd::kAnyTokenId};
  Tally tally;
  const auto start = Clock::now();
  constexpr int kCases = 1000;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0x70ce5000u + static_cast<uint64_t>(i));
    TempDir tmp;
    const int64_t vocab = rng.pick(vocabs);
    // Mostly ids below the vocabulary; past uint16 only where the vocabulary is.
    const int64_t vocab_hint = std::clamp<int64_t>(vocab, 1, rng.percent(50) ? 113 : 200000);
    TokenCase c = make_token_case(rng, tmp.path(), vocab_hint);
    const std::string label = fmt::format("token case {} ({}, spec {}, vocab {})", i, c.description,
                                          c.spec, vocab);
    std::string stage = "open";
    std::string outcome;
    auto t0 = Clock::now();
    try {
      auto data = spmd::TokenDataset::open(c.spec, vocab);
      int64_t total = 0;
      for (const auto& f : data->files()) {
        total += f.num_tokens();
        if (f.num_tokens() <= 0) tally.fail(label + ": an opened file holds no tokens");
      }
      if (total != data->num_tokens()) tally.fail(label + ": num_tokens is not the files' sum");
      stage = "loader";
      exercise_loader(data, vocab, rng, label, tally);
      outcome = "ok";
    } catch (const spmd::UsageError& e) {
      if (verbose()) fmt::print("[fuzz] {}: {}\n", label, e.what());
      if (!names_a_file(e.what(), c.spec, tmp.path()))
        tally.fail(fmt::format("{}: UsageError at {} does not name the file: {}", label, stage, e.what()));
      outcome = "usage_error@" + stage;
    } catch (const spmd::RuntimeError& e) {
      if (!names_a_file(e.what(), c.spec, tmp.path()))
        tally.fail(fmt::format("{}: RuntimeError at {} does not name the file: {}", label, stage, e.what()));
      outcome = "runtime_error@" + stage;
    } catch (const std::exception& e) {
      tally.fail(fmt::format("{}: {} at {}: {}", label, typeid(e).name(), stage, e.what()));
      outcome = "WRONG_EXCEPTION@" + stage;
    }
    tally.record(i, outcome + " (" + c.description + ")",
                 std::chrono::duration<double>(Clock::now() - t0).count());
  }
  tally.print(fmt::format("token files ({:.1f} s)",
                          std::chrono::duration<double>(Clock::now() - start).count()));
  CHECK(tally.cases == kCases);
  CHECK(tally.failures.empty());
  CHECK(tally.count("ok") > 0);
  CHECK(tally.count("usage_error") > 0);
}

// A tokenizer's files come from a user or the internet: mutated vocab.json and merges.txt (bit flips,
// cuts, duplicated and deleted ranges, wrong JSON types, invalid UTF-8, huge numbers) and
// tokenizer.json (GPT-2's kind and Llama 3's, with its split pattern and added tokens) either load
// or are a UsageError naming the file; never a crash, a sanitizer report or another exception.
TEST_CASE("tokenizer: mutated vocab.json, merges.txt and tokenizer.json through the tokenizer readers") {
  spmd::BpeTrainer trainer;
  trainer.add_text("the cat sat on the mat; the hat, the bat and the rat sat flat. 12345 ünïcödé naïve café\n");
  const spmd::TokenizerFileTexts seed = spmd::tokenizer_file_texts(trainer.train(40));
  nlohmann::json merges_list = nlohmann::json::array();
  for (const std::string& line : split_lines(seed.merges_txt))
    if (!line.empty() && line[0] != '#') merges_list.push_back(line);
  const nlohmann::json seed_vocab = nlohmann::json::parse(seed.vocab_json);
  const nlohmann::json model = {{"type", "BPE"}, {"vocab", seed_vocab}, {"merges", merges_list}};
  // GPT-2's kind, and Llama 3's: a Split pattern, added tokens after the vocabulary, a start token.
  const std::string gpt2_tokenizer_json =
      nlohmann::json{{"model", model}, {"pre_tokenizer", {{"type", "ByteLevel"}}}}.dump();
  const nlohmann::json split = {{"type", "Split"},
                                {"pattern", {{"Regex", "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
                                                       "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                                {"behavior", "Isolated"}};
  const nlohmann::json single = nlohmann::json::array(
      {{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}}, {{"Sequence", {{"id", "A"}}}}});
  nlohmann::json llama = {{"model", model}};
  llama["model"]["ignore_merges"] = true;
  llama["added_tokens"] = nlohmann::json::array(
      {{{"id", seed_vocab.size()}, {"content", "<|begin_of_text|>"}, {"special", true}}});
  llama["pre_tokenizer"] = {{"type", "Sequence"},
                            {"pretokenizers", {split, {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  llama["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}};
  const std::string llama_tokenizer_json = llama.dump();
  {  // both seeds load: a mutant's failure is the mutation's
    TempDir tmp;
    for (const std::string* text : {&gpt2_tokenizer_json, &llama_tokenizer_json}) {
      write_file(tmp.file("tokenizer.json"), *text);
      CHECK(spmd::read_tokenizer_json(tmp.file("tokenizer.json")).encode("the cat").size() > 0);
    }
  }
  static const std::vector<std::string> kInserts = {"\"", "{", "}", "[", "]", ",", ":", "null", "-1",
                                                   "99999999999999999999", "1e400", "\xff\xfe", "\xc3", "\n",
                                                   "#version: 0.2\n", " ", "\"\\u0000\"", "\"\\ud800\""};
  Tally tally;
  constexpr int kCases = 600;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0x70c0e000u + static_cast<uint64_t>(i));
    TempDir tmp;
    std::string vocab = seed.vocab_json, merges = seed.merges_txt;
    std::string& text = rng.percent(50) ? vocab : merges;
    for (int edits = 1 + static_cast<int>(rng.below(3)); edits > 0; --edits) {
      const size_t at = text.empty() ? 0 : rng.below(text.size());
      switch (rng.below(4)) {
        case 0: if (!text.empty()) text[at] = static_cast<char>(text[at] ^ (1 << rng.below(8))); break;
        case 1: text.erase(at, 1 + rng.below(rng.percent(70) ? 8 : text.size() + 1)); break;
        case 2: text.insert(at, rng.pick(kInserts)); break;
        default: text.insert(at, text.substr(rng.below(text.size() + 1), rng.below(64))); break;
      }
    }
    write_file(tmp.file("vocab.json"), vocab);
    write_file(tmp.file("merges.txt"), merges);
    // Every third case: the same edits to one tokenizer.json holding both.
    const bool one_file = i % 3 == 2;
    if (one_file) {
      std::string joined = (i / 3) % 2 ? llama_tokenizer_json : gpt2_tokenizer_json;
      for (int edits = 1 + static_cast<int>(rng.below(3)); edits > 0; --edits) {
        const size_t at = rng.below(joined.size());
        if (rng.percent(50)) joined.insert(at, rng.pick(kInserts));
        else joined.erase(at, 1 + rng.below(8));
      }
      write_file(tmp.file("tokenizer.json"), joined);
    }
    const std::string label = fmt::format("tokenizer case {}", i);
    run_reader_case(tally, i, label, {tmp.file("vocab.json"), tmp.file("merges.txt"), tmp.file("tokenizer.json")}, [&] {
      const spmd::BpeTokenizer t = one_file ? spmd::read_tokenizer_json(tmp.file("tokenizer.json"))
                                            : spmd::read_vocab_and_merges(tmp.file("vocab.json"), tmp.file("merges.txt"));
      if (t.encode("the cat sat").empty()) tally.fail(label + ": a loaded tokenizer encoded text to nothing");
    });
  }
  check_reader_pass(tally, kCases, "tokenizer files");
}

// A corpus in its stored form: plain JSON Lines, or compressed as .gz (gzip) or .zst.
std::string compressed(const std::string& text, const std::string& ext, const std::string& path) {
  if (ext == ".gz") {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
    return spmd::test::read_file(path);
  }
  if (ext == ".zst") {
    std::string out(ZSTD_compressBound(text.size()), '\0');
    out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
    return out;
  }
  return text;
}

// Corpora come from the internet: JSON Lines with broken lines, wrong types, invalid UTF-8, and
// compressed streams cut short or corrupted go through prepare() as spmd-prepare runs it; the
// outcomes allowed are success or a UsageError naming the file.
TEST_CASE("prepare: mutated JSON Lines corpora, plain, .gz and .zst, through prepare") {
  std::string seed;
  for (int i = 0; i < 200; ++i)
    seed += fmt::format("{{\"text\": \"document {} about caf\u00e9s and \\\"quotes\\\"\", \"id\": {}}}\n", i, i);
  static const std::vector<std::string> kExts = {".jsonl", ".jsonl.gz", ".jsonl.zst"};
  static const std::vector<std::string> kInserts = {"\"", "{", "}", "\n", "\\", "\xff", "\xc3", "null", "[1]", "\"text\": 5, "};
  Tally tally;
  constexpr int kCases = 240;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0x9e9a0000u + static_cast<uint64_t>(i));
    TempDir tmp;
    const std::string ext = kExts[static_cast<size_t>(i) % kExts.size()];
    const std::string path = tmp.file("corpus" + ext);
    std::string text = seed;
    const bool mutate_stream = ext != ".jsonl" && rng.percent(50);
    if (!mutate_stream) {
      const size_t at = rng.below(text.size());
      if (rng.percent(50)) text.insert(at, rng.pick(kInserts));
      else text[at] = static_cast<char>(text[at] ^ (1 << rng.below(8)));
    }
    std::string bytes = compressed(text, ext.substr(6), path);
    if (mutate_stream) {  // corrupt or cut the compressed stream itself
      if (rng.percent(50)) bytes.resize(rng.below(bytes.size()));
      else bytes[rng.below(bytes.size())] ^= static_cast<char>(1 << rng.below(8));
    }
    write_file(path, bytes);
    spmd::PrepareOptions options;
    options.inputs = {path};
    options.out_dir = tmp.file("out");
    options.vocab = rng.percent(50) ? spmd::VocabKind::kByte : spmd::VocabKind::kChar;
    options.workers = 1 + static_cast<int>(rng.below(2));
    options.val_tokens = 16;
    run_reader_case(tally, i, fmt::format("corpus case {} ({})", i, ext), {path}, [&] { spmd::prepare(options); }, ext);
  }
  check_reader_pass(tally, kCases, "corpora");
}

// A planner rates file is written by hand for a cluster one is not on: mutated ones (numbers
// zero, negative, huge or of the wrong type; keys dropped or duplicated; the text cut) either load
// with every rate finite and positive, or are a UsageError naming the file.
TEST_CASE("plan: mutated rates files through read_machine_rates") {
  const std::string seed = spmd::test::read_file(spmd::test::source_path("configs/rates/example-gpu-node.json"));
  static const std::vector<std::string> kValues = {"0", "-1", "1e400", "-1e400", "1e-320", "\"fast\"", "null",
                                                  "[]", "{}", "true", "99999999999999999999999", "NaN"};
  Tally tally;
  constexpr int kCases = 500;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0x4a7e5000u + static_cast<uint64_t>(i));
    TempDir tmp;
    std::string text = seed;
    const auto numbers = number_tokens(text);
    switch (rng.below(4)) {
      case 0:
      case 1:
        if (!numbers.empty()) {
          const auto [at, len] = rng.pick(numbers);
          text.replace(at, len, rng.pick(kValues));
        }
        break;
      case 2: text.resize(rng.below(text.size())); break;
      default: {
        const size_t at = rng.below(text.size());
        text.erase(at, 1 + rng.below(24));
        break;
      }
    }
    const std::string path = tmp.file("rates.json");
    write_file(path, text);
    const std::string label = fmt::format("rates case {}", i);
    run_reader_case(tally, i, label, {path}, [&] {
      const spmd::MachineRates r = spmd::read_machine_rates(path);
      const auto good = [](double x) { return std::isfinite(x) && x > 0; };
      bool ok = good(r.matmul_flops_per_s) && good(r.memory_bytes_per_s) && r.attention_flops_per_s >= 0;
      for (const auto& [name, link] : r.axes) ok = ok && good(link.bytes_per_s) && std::isfinite(link.latency_s) && link.latency_s >= 0;
      for (const auto& [size, link] : r.group_sizes) ok = ok && good(link.bytes_per_s) && link.latency_s >= 0;
      if (!ok) tally.fail(label + ": loaded a rate that is not finite and positive:\n" + text);
    });
  }
  check_reader_pass(tally, kCases, "rates files");
}

// Multiple-choice task files (HellaSwag's JSON Lines) come from the internet: mutated lines (values
// of the wrong type, labels out of range, lines cut, invalid UTF-8) either load, every example with
// two or more endings and a label among them, or are a UsageError naming the file.
TEST_CASE("eval: mutated multiple-choice task files through read_choice_task") {
  const std::string seed =
      "{\"ctx\": \"A man sits on a roof. he\", \"endings\": [\"is using wrap.\", \"is ripping level tiles off.\", "
      "\"holds a rubik's cube.\", \"starts pulling up roofing.\"], \"label\": 3, \"ind\": 4}\n"
      "{\"ctx\": \"The dog\", \"endings\": [\"runs.\", \"sleeps.\"], \"label\": \"0\"}\n\n"
      "{\"ctx\": \"Caf\u00e9 \u00fcber\", \"endings\": [\"a\", \"b\", \"c\"], \"label\": 1, \"split\": \"val\"}\n";
  static const std::vector<std::string> kValues = {"0", "-1", "2", "4", "99999999999999999999", "1e400", "1.5",
                                                  "\"1\"", "\"x\"", "\"\"", "null", "[]", "{}", "[\"a\"]", "true"};
  static const std::vector<std::string> kInserts = {"\"", "{", "}", "[", "]", ",", ":", "\n", "\xff\xfe", "\xc3"};
  Tally tally;
  constexpr int kCases = 400;
  for (int i = 0; i < kCases; ++i) {
    Rng rng(0xe7a10000u + static_cast<uint64_t>(i));
    TempDir tmp;
    std::string text = seed;
    for (int edits = 1 + static_cast<int>(rng.below(2)); edits > 0; --edits) {
      const auto numbers = number_tokens(text);
      const size_t at = text.empty() ? 0 : rng.below(text.size());
      switch (rng.below(5)) {
        case 0:
        case 1:
          if (!numbers.empty()) {
            const auto [pos, len] = rng.pick(numbers);
            text.replace(pos, len, rng.pick(kValues));
          }
          break;
        case 2: text.resize(rng.below(text.size() + 1)); break;
        case 3: text.insert(at, rng.pick(kInserts)); break;
        default: text.erase(at, 1 + rng.below(24)); break;
      }
    }
    const std::string path = tmp.file("task.jsonl");
    write_file(path, text);
    const std::string label = fmt::format("task case {}", i);
    run_reader_case(tally, i, label, {path}, [&] {
      for (const spmd::ChoiceExample& e : spmd::read_choice_task(path, static_cast<int64_t>(rng.below(3)))) {
        if (e.endings.size() < 2 || e.label < 0 || e.label >= static_cast<int64_t>(e.endings.size()))
          tally.fail(fmt::format("{}: line {} loaded with {} endings and label {}:\n{}", label, e.line, e.endings.size(),
                                 e.label, text));
      }
    });
  }
  check_reader_pass(tally, kCases, "multiple-choice task files");
}

// Found by the pass above (anchors in mutants): `--set` used to assign through the node it
// replaced, so every YAML alias of that value changed with it.
TEST_CASE("config: --set replaces one key, not every alias of its value") {
  spmd::Config c = spmd::parse_config("train: {steps: &n 2000, decay_steps: *n}\n", "alias.yaml",
                                      {"train.steps=100"});
  CHECK(c.train.steps == 100);
  CHECK(c.train.decay_steps == 2000);
}
