// Reading and writing Hugging Face tokenizer files (see bpe_files.h).
#include "data/bpe_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/byte_unicode.h"
#include "util/error.h"

namespace spmd {
namespace {

using Json = nlohmann::json;

// Vocabulary strings and the ids they name, as read from a file.
struct Vocab {
  std::vector<BpeToken> tokens;
  std::unordered_map<std::string, int32_t> id_of;  // vocab.json key -> id
};

std::string quoted(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json parse_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPMD_CHECK(in.good(), "{}: cannot open tokenizer file", path);
  try {
    return Json::parse(in);
  } catch (const Json::exception& e) {
    throw UsageError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

// {"token": id, ...} with ids 0..n-1 each once. Keys that are not byte-level strings and
// <|endoftext|> are special tokens; they decode to their own UTF-8.
Vocab vocab_from_json(const Json& j, const std::string& origin) {
  SPMD_CHECK(j.is_object(), "{}: the vocabulary must be a JSON object of token -> id", origin);
  SPMD_CHECK(j.size() <= (size_t{1} << 30), "{}: vocabulary too large", origin);
  Vocab v;
  v.tokens.resize(j.size());
  std::vector<bool> seen(j.size(), false);
  for (const auto& [key, value] : j.items()) {
    SPMD_CHECK(value.is_number_integer(), "{}: id of token {} is not an integer", origin,
               quoted(key));
    const auto id = value.get<int64_t>();
    SPMD_CHECK(id >= 0 && id < static_cast<int64_t>(j.size()) && !seen[id],
               "{}: token {} has id {}; ids must be 0..{} each used once", origin, quoted(key), id,
               j.size() - 1);
    seen[id] = true;
    BpeToken& t = v.tokens[id];
    t.special = key == kEndOfText || !unicode_string_to_bytes(key, t.bytes);
    if (t.special) t.bytes = key;
    v.id_of.emplace(key, static_cast<int32_t>(id));
  }
  return v;
}

// The merge "left right" as ids, or UsageError at `where` (file:line or file entry).
BpeMerge merge_of(const Vocab& v, const std::string& left, const std::string& right,
                  const std::string& where) {
  auto find = [&](const std::string& s) {
    auto it = v.id_of.find(s);
    SPMD_CHECK(it != v.id_of.end(), "{}: merge token {} is not in the vocabulary", where,
               quoted(s));
    return it->second;
  };
  return {find(left), find(right), find(left + right)};
}

BpeMerge merge_of_line(const Vocab& v, const std::string& line, const std::string& where) {
  const size_t space = line.find(' ');
  SPMD_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                 line.find(' ', space + 1) == std::string::npos,
             "{}: expected \"left right\" (two tokens, one space), got {}", where, quoted(line));
  return merge_of(v, line.substr(0, space), line.substr(space + 1), where);
}

// Appends <|endoftext|> when the vocabulary lacks it; returns its id.
int32_t ensure_eot(Vocab& v) {
  auto it = v.id_of.find(kEndOfText);
  if (it != v.id_of.end()) return it->second;
  v.tokens.push_back({kEndOfText, true});
  return static_cast<int32_t>(v.tokens.size() - 1);
}

}  // namespace

BpeTokenizer read_vocab_and_merges(const std::string& vocab_path, const std::string& merges_path) {
  Vocab v = vocab_from_json(parse_json_file(vocab_path), vocab_path);
  std::ifstream in(merges_path, std::ios::binary);
  SPMD_CHECK(in.good(), "{}: cannot open tokenizer file", merges_path);
  std::vector<BpeMerge> merges;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(merge_of_line(v, line, fmt::format("{}:{}", merges_path, line_no)));
  }
  const int32_t eot = ensure_eot(v);
  return BpeTokenizer(std::move(v.tokens), std::move(merges), eot, vocab_path);
}

BpeTokenizer read_tokenizer_json(const std::string& path) {
  const Json j = parse_json_file(path);
  try {
    const Json& model = j.at("model");
    SPMD_CHECK(model.value("type", "BPE") == "BPE", "{}: model.type is {}, not BPE", path,
               model.value("type", ""));
    SPMD_CHECK(!model.value("ignore_merges", false) && model.value("dropout", Json()).is_null(),
               "{}: ignore_merges and dropout are not supported (GPT-2 uses neither)", path);
    SPMD_CHECK(j.value("normalizer", Json()).is_null(),
               "{}: has a normalizer; GPT-2's byte-level BPE uses none", path);
    const Json pre = j.value("pre_tokenizer", Json());
    SPMD_CHECK(pre.is_object() && pre.value("type", "") == "ByteLevel" &&
                   !pre.value("add_prefix_space", false) && pre.value("use_regex", true),
               "{}: pre_tokenizer must be ByteLevel (add_prefix_space false, use_regex true), "
               "as GPT-2's",
               path);
    Vocab v = vocab_from_json(model.at("vocab"), path + ": model.vocab");
    std::vector<BpeMerge> merges;
    const Json& list = model.at("merges");
    SPMD_CHECK(list.is_array(), "{}: model.merges must be a list", path);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = fmt::format("{}: model.merges[{}]", path, i);
      const Json& m = list[i];
      if (m.is_string()) {
        merges.push_back(merge_of_line(v, m.get<std::string>(), where));
      } else {
        SPMD_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "{}: expected \"a b\" or [\"a\", \"b\"]", where);
        merges.push_back(merge_of(v, m[0].get<std::string>(), m[1].get<std::string>(), where));
      }
    }
    const int32_t eot = ensure_eot(v);
    return BpeTokenizer(std::move(v.tokens), std::move(merges), eot, path);
  } catch (const Json::exception& e) {
    throw UsageError(fmt::format("{}: malformed tokenizer.json: {}", path, e.what()));
  }
}

BpeTokenizer read_tokenizer_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  SPMD_CHECK(fs::is_directory(d), "{}: --tokenizer must be a directory", dir);
  if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt"))
    return read_vocab_and_merges((d / "vocab.json").string(), (d / "merges.txt").string());
  if (fs::exists(d / "tokenizer.json")) return read_tokenizer_json((d / "tokenizer.json").string());
  throw UsageError(fmt::format(
      "{}: holds neither vocab.json + merges.txt nor tokenizer.json (Hugging Face GPT-2 files)", dir));
}

namespace {

// The vocab.json key of a token: its byte-level string, or a special token's own text.
std::string vocab_key(const BpeToken& t) {
  return t.special ? t.bytes : bytes_to_unicode_string(t.bytes);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out.good())
      throw RuntimeError(fmt::format("{}: write failed: {}", tmp, std::strerror(errno)));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw RuntimeError(fmt::format("{}: cannot rename into place: {}", path, ec.message()));
}

}  // namespace

void write_vocab_and_merges(const BpeTokenizer& tokenizer, const std::string& dir) {
  // Written by hand in id order: ordered_json's operator[] searches linearly (quadratic here).
  const auto& tokens = tokenizer.tokens();
  std::string vocab = "{";
  for (size_t id = 0; id < tokens.size(); ++id)
    vocab += fmt::format("{}{}:{}", id ? "," : "", Json(vocab_key(tokens[id])).dump(), id);
  write_file_atomically(dir + "/vocab.json", vocab + "}\n");
  std::string merges = "#version: 0.2\n";
  for (const BpeMerge& m : tokenizer.merges())
    merges += vocab_key(tokens[m.left]) + " " + vocab_key(tokens[m.right]) + "\n";
  write_file_atomically(dir + "/merges.txt", merges);
}

}  // namespace spmd
