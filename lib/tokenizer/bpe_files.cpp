// Reading and writing Hugging Face tokenizer files (see bpe_files.h).
#include "tokenizer/bpe_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <memory_resource>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_unicode.h"
#include "util/error.h"

namespace spmd {
namespace {

using Json = nlohmann::json;

// Vocabulary strings and the ids they name, as read from a file. id_of views the keys it owns, so
// a merge's tokens are looked up without a string made for each.
// Its nodes come from one arena: no malloc and free per key, and neighbours in memory.
struct Vocab {
  std::vector<BpeToken> tokens;
  std::vector<std::string> keys;  // vocab.json keys by id
  std::unique_ptr<std::pmr::monotonic_buffer_resource> arena =
      std::make_unique<std::pmr::monotonic_buffer_resource>();
  std::pmr::unordered_map<std::string_view, int32_t> id_of{arena.get()};  // key -> id
};

std::string json_quoted(const std::string& s) {
  return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);  // fails on a directory, too
  SPMD_CHECK(!ec, "{}: cannot read tokenizer file: {}", path, ec.message());
  std::ifstream in(path, std::ios::binary);
  std::string text(size, '\0');  // read once, straight into place
  in.read(text.data(), static_cast<std::streamsize>(size));
  SPMD_CHECK(in.gcount() == static_cast<std::streamsize>(size), "{}: cannot read tokenizer file", path);
  return text;
}

Json parse_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw UsageError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

using VocabEntries = std::vector<std::pair<std::string, int64_t>>;  // (token, id) in file order

// vocab.json read as a stream of (key, id) events: no document tree of 50,000 nodes to build,
// walk and free (most of a start-up's time before).
class VocabReader : public nlohmann::json_sax<Json> {
 public:
  explicit VocabReader(const std::string& path) : path_(path) {}
  VocabEntries entries;

  bool start_object(std::size_t) override {
    if (depth_++ == 0) return true;
    return not_an_id();
  }
  bool end_object() override { return --depth_, true; }
  bool key(string_t& k) override { return key_ = std::move(k), true; }
  bool number_integer(number_integer_t v) override { return id(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return id(v <= static_cast<number_unsigned_t>(INT64_MAX) ? static_cast<int64_t>(v) : -1);
  }
  bool null() override { return not_an_id(); }
  bool boolean(bool) override { return not_an_id(); }
  bool number_float(number_float_t, const string_t&) override { return not_an_id(); }
  bool string(string_t&) override { return not_an_id(); }
  bool binary(binary_t&) override { return not_an_id(); }
  bool start_array(std::size_t) override { return not_an_id(); }
  bool end_array() override { return not_an_id(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw UsageError(fmt::format("{}: not valid JSON: {}", path_, e.what()));
  }

 private:
  bool id(int64_t v) {
    if (depth_ != 1) return not_an_id();
    entries.emplace_back(std::move(key_), v);
    return true;
  }
  bool not_an_id() {
    SPMD_CHECK(depth_ > 0, "{}: the vocabulary must be a JSON object of token -> id", path_);
    throw UsageError(fmt::format("{}: id of token {} is not an integer", path_, json_quoted(key_)));
  }
  const std::string& path_;
  int depth_ = 0;
  std::string key_;
};

VocabEntries read_vocab_entries(const std::string& path) {
  const std::string text = read_file(path);
  VocabReader reader(path);
  reader.entries.reserve(text.size() / 12);  // ~12 bytes per entry in GPT-2's file
  Json::sax_parse(text, &reader);
  return std::move(reader.entries);
}

VocabEntries vocab_entries_of(const Json& j, const std::string& origin) {
  SPMD_CHECK(j.is_object(), "{}: the vocabulary must be a JSON object of token -> id", origin);
  VocabEntries entries;
  for (const auto& [key, value] : j.items()) {
    SPMD_CHECK(value.is_number_integer(), "{}: id of token {} is not an integer", origin, json_quoted(key));
    entries.emplace_back(key, value.get<int64_t>());
  }
  return entries;
}

// {"token": id, ...} with ids 0..n-1 each once. Keys that are not byte-level strings and
// <|endoftext|> are special tokens; they decode to their own UTF-8.
Vocab vocab_from_entries(VocabEntries entries, const std::string& origin) {
  const size_t n = entries.size();
  SPMD_CHECK(n <= (size_t{1} << 30), "{}: vocabulary too large", origin);
  Vocab v;
  v.tokens.resize(n);
  v.keys.resize(n);  // never resized again: id_of views these strings
  v.id_of.reserve(n);
  std::vector<bool> seen(n, false);
  for (auto& [key, id] : entries) {
    SPMD_CHECK(id >= 0 && id < static_cast<int64_t>(n) && !seen[id],
               "{}: token {} has id {}; ids must be 0..{} each used once", origin, json_quoted(key), id, n - 1);
    seen[id] = true;
    BpeToken& t = v.tokens[id];
    t.special = key == kEndOfText || !unicode_string_to_bytes(key, t.bytes);
    if (t.special) t.bytes = key;
    v.keys[id] = std::move(key);
    const auto [it, first] = v.id_of.emplace(v.keys[id], static_cast<int32_t>(id));
    SPMD_CHECK(first, "{}: token {} appears twice", origin, json_quoted(std::string(it->first)));
  }
  return v;
}

// The merge "left right" as ids, or UsageError at where() (file:line or file entry), which is
// only formatted for an error.
template <class Where>
BpeMerge merge_of(const Vocab& v, std::string_view left, std::string_view right, const Where& where) {
  auto find = [&](std::string_view s) {
    auto it = v.id_of.find(s);
    SPMD_CHECK(it != v.id_of.end(), "{}: merge token {} is not in the vocabulary", where(),
               json_quoted(std::string(s)));
    return it->second;
  };
  thread_local std::string joined;  // reused: no allocation per merge
  joined.assign(left).append(right);
  return {find(left), find(right), find(joined)};
}

template <class Where>
BpeMerge merge_of_line(const Vocab& v, std::string_view line, const Where& where) {
  const size_t space = line.find(' ');
  SPMD_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                 line.find(' ', space + 1) == std::string::npos,
             "{}: expected \"left right\" (two tokens, one space), got {}", where(), json_quoted(std::string(line)));
  return merge_of(v, line.substr(0, space), line.substr(space + 1), where);
}

// Appends <|endoftext|> when the vocabulary lacks it; returns its id.
int32_t ensure_eot(Vocab& v) {
  auto it = v.id_of.find(kEndOfText);
  if (it != v.id_of.end()) return it->second;
  v.tokens.push_back({kEndOfText, true});  // keys and id_of are not used after this
  return static_cast<int32_t>(v.tokens.size() - 1);
}

}  // namespace

BpeTokenizer read_vocab_and_merges(const std::string& vocab_path, const std::string& merges_path) {
  Vocab v = vocab_from_entries(read_vocab_entries(vocab_path), vocab_path);
  const std::string text = read_file(merges_path);
  std::vector<BpeMerge> merges;
  size_t begin = 0;
  for (int64_t line_no = 1; begin < text.size(); ++line_no) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(merge_of_line(v, line, [&] { return fmt::format("{}:{}", merges_path, line_no); }));
  }
  const int32_t eot = ensure_eot(v);
  return BpeTokenizer(std::move(v.tokens), std::move(merges), eot, vocab_path);
}

namespace {

// A tokenizer.json field we cannot follow: the file, the field and what it says.
[[noreturn]] void unsupported(const std::string& path, const std::string& field, const Json& value,
                              const std::string& supported) {
  throw UsageError(fmt::format("{}: {} is {}; spmd-prepare supports {}", path, field,
                               value.dump(-1, ' ', false, Json::error_handler_t::replace), supported));
}

void require(bool ok, const std::string& path, const std::string& field, const Json& value,
             const std::string& supported) {
  if (!ok) unsupported(path, field, value, supported);
}

// A ByteLevel pre-tokenizer: GPT-2's pattern when use_regex, none after a Split.
void check_byte_level(const Json& p, const std::string& path, const std::string& field, bool use_regex) {
  require(!p.value("add_prefix_space", false), path, field + ".add_prefix_space", p.value("add_prefix_space", Json()),
          "false");
  require(p.value("use_regex", true) == use_regex, path, field + ".use_regex", p.value("use_regex", Json()),
          use_regex ? "true (GPT-2's pattern)" : "false after a Split (Llama 3's)");
}

// The split pattern of pre_tokenizer: ByteLevel alone (GPT-2's) or Sequence [Split (Regex,
// Isolated), ByteLevel without its regex] (Llama 3's).
std::shared_ptr<const SplitPattern> split_pattern_of(const Json& j, const std::string& path) {
  const Json pre = j.value("pre_tokenizer", Json());
  const std::string supported = "ByteLevel, or a Sequence of a Split and a ByteLevel (Llama 3's)";
  require(pre.is_object(), path, "pre_tokenizer", pre, supported);
  const std::string type = pre.value("type", "");
  if (type == "ByteLevel") {
    check_byte_level(pre, path, "pre_tokenizer", true);
    return SplitPattern::gpt2();
  }
  require(type == "Sequence", path, "pre_tokenizer.type", pre.value("type", Json()), supported);
  const Json list = pre.value("pretokenizers", Json());
  require(list.is_array() && list.size() == 2 && list[0].value("type", "") == "Split" &&
              list[1].value("type", "") == "ByteLevel",
          path, "pre_tokenizer.pretokenizers", list, "[Split, ByteLevel]");
  const Json& split = list[0];
  const std::string field = "pre_tokenizer.pretokenizers[0]";
  check_byte_level(list[1], path, "pre_tokenizer.pretokenizers[1]", false);
  require(split.value("behavior", "") == "Isolated", path, field + ".behavior", split.value("behavior", Json()),
          "\"Isolated\"");
  require(!split.value("invert", false), path, field + ".invert", split.value("invert", Json()), "false");
  const Json pattern = split.value("pattern", Json());
  require(pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string(), path,
          field + ".pattern", pattern, "{\"Regex\": ...}");
  return SplitPattern::compile(pattern["Regex"].get<std::string>(), path + ": " + field + ".pattern.Regex");
}

// The fields around the model and pre-tokenizer that change ids or text, checked to be neutral.
void check_neutral_fields(const Json& j, const Json& model, const std::string& path) {
  for (const char* key : {"normalizer", "truncation", "padding"})
    require(j.value(key, Json()).is_null(), path, key, j.value(key, Json()), "null");
  const Json decoder = j.value("decoder", Json());
  require(decoder.is_null() || decoder.value("type", "") == "ByteLevel", path, "decoder", decoder,
          "ByteLevel or null");
  require(model.value("type", "BPE") == "BPE", path, "model.type", model.value("type", Json()), "\"BPE\"");
  require(model.value("dropout", Json()).is_null(), path, "model.dropout", model.value("dropout", Json()), "null");
  require(!model.value("byte_fallback", false), path, "model.byte_fallback", model.value("byte_fallback", Json()),
          "false (byte-level BPE needs no fallback)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json v = model.value(key, Json());
    require(v.is_null() || v == "", path, std::string("model.") + key, v, "null");
  }
}

// added_tokens: [{id, content, special, lstrip, rstrip, single_word, normalized}]. Tokens not in
// model.vocab join the vocabulary at their ids; all are found in text by their content.
VocabEntries added_entries(const Json& j, const Json& model_vocab, const std::string& path,
                           std::vector<std::pair<std::string, bool>>& contents) {
  VocabEntries extra;
  const Json list = j.value("added_tokens", Json::array());
  require(list.is_array(), path, "added_tokens", list, "a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& t = list[i];
    const std::string field = fmt::format("added_tokens[{}]", i);
    require(t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") &&
                t["content"].is_string(),
            path, field, t, "{\"id\": integer, \"content\": string, ...}");
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      require(!t.value(flag, false), path, field + "." + flag, t.value(flag, Json()), "false");
    const std::string content = t["content"].get<std::string>();
    const int64_t id = t["id"].get<int64_t>();
    if (model_vocab.contains(content)) {
      SPMD_CHECK(model_vocab[content] == id, "{}: {} has id {} but model.vocab gives {} id {}", path, field, id,
                 json_quoted(content), model_vocab[content].dump());
    } else {
      extra.emplace_back(content, id);
    }
    contents.emplace_back(content, t.value("special", false));
  }
  return extra;
}

// The start-of-text token tokenizers puts before every sequence (post_processor's template, as
// Llama 3's <|begin_of_text|>), or "" when it adds none.
std::string start_token_of(const Json& j, const std::string& path) {
  const Json post = j.value("post_processor", Json());
  std::vector<std::pair<std::string, Json>> steps;  // (field, processor)
  if (post.is_object() && post.value("type", "") == "Sequence") {
    const Json list = post.value("processors", Json());
    require(list.is_array(), path, "post_processor.processors", list, "a list");
    for (size_t i = 0; i < list.size(); ++i) steps.emplace_back(fmt::format("post_processor.processors[{}]", i), list[i]);
  } else if (!post.is_null()) {
    steps.emplace_back("post_processor", post);
  }
  std::string start;
  for (const auto& [field, p] : steps) {
    const std::string type = p.value("type", "");
    if (type == "ByteLevel") continue;  // offsets only
    require(type == "TemplateProcessing", path, field + ".type", p.value("type", Json()),
            "ByteLevel, TemplateProcessing or a Sequence of them");
    const Json single = p.value("single", Json());
    const bool bare = single.is_array() && single.size() == 1 && single[0].contains("Sequence");
    const bool prefixed = single.is_array() && single.size() == 2 && single[0].contains("SpecialToken") &&
                          single[1].contains("Sequence");
    require(bare || prefixed, path, field + ".single", single,
            "\"$A\" or one special token before it (\"<|begin_of_text|> $A\")");
    if (prefixed) start = single[0]["SpecialToken"].value("id", "");
  }
  return start;
}

}  // namespace

BpeTokenizer read_tokenizer_json(const std::string& path) {
  const Json j = parse_json_file(path);
  try {
    const Json& model = j.at("model");
    check_neutral_fields(j, model, path);
    BpeTextRules rules;
    rules.pattern = split_pattern_of(j, path);
    rules.ignore_merges = model.value("ignore_merges", false);
    const std::string origin = path + ": model.vocab";
    const Json& model_vocab = model.at("vocab");
    VocabEntries entries = vocab_entries_of(model_vocab, origin);
    std::vector<std::pair<std::string, bool>> added;  // content, special
    for (auto& entry : added_entries(j, model_vocab, path, added)) entries.push_back(std::move(entry));
    Vocab v = vocab_from_entries(std::move(entries), origin);
    for (const auto& [content, special] : added) {
      const int32_t id = v.id_of.at(content);
      // A special token, or one outside the byte-level vocabulary, decodes to its own text (as
      // tokenizers' decode gives it); a plain one of model.vocab stays a BPE token.
      if (special || v.tokens[id].bytes != content) v.tokens[id] = {content, true};
      rules.added_in_text.push_back(id);
    }
    std::vector<BpeMerge> merges;
    const Json& list = model.at("merges");
    SPMD_CHECK(list.is_array(), "{}: model.merges must be a list", path);
    for (size_t i = 0; i < list.size(); ++i) {
      auto where = [&] { return fmt::format("{}: model.merges[{}]", path, i); };
      const Json& m = list[i];
      if (m.is_string()) {
        merges.push_back(merge_of_line(v, m.get<std::string>(), where));
      } else {
        SPMD_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "{}: expected \"a b\" or [\"a\", \"b\"]", where());
        merges.push_back(merge_of(v, m[0].get<std::string>(), m[1].get<std::string>(), where));
      }
    }
    const std::string start = start_token_of(j, path);
    int32_t eot = -1;
    if (start.empty()) {
      eot = ensure_eot(v);
    } else {
      auto it = v.id_of.find(start);
      SPMD_CHECK(it != v.id_of.end() && v.tokens[it->second].special,
                 "{}: post_processor's start token {} is not one of added_tokens", path, json_quoted(start));
      eot = it->second;
      rules.eot_starts_documents = true;
    }
    return BpeTokenizer(std::move(v.tokens), std::move(merges), eot, path, std::move(rules));
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

// s as a JSON string. The keys are UTF-8 (they were read from JSON), so only quotes, backslashes
// and control characters need escapes; one append per character instead of a json value each.
void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    switch (c) {  // nlohmann's escapes, so the file reads as before
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else out += c;
    }
  }
  out += '"';
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

TokenizerFileTexts tokenizer_file_texts(const BpeTokenizer& tokenizer) {
  // Written by hand in id order: ordered_json's operator[] searches linearly (quadratic here).
  const auto& tokens = tokenizer.tokens();
  std::vector<std::string> keys(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) keys[id] = vocab_key(tokens[id]);
  TokenizerFileTexts texts;
  texts.vocab_json = "{";
  for (size_t id = 0; id < keys.size(); ++id) {
    if (id) texts.vocab_json += ',';
    append_json_string(texts.vocab_json, keys[id]);
    texts.vocab_json += ':' + std::to_string(id);
  }
  texts.vocab_json += "}\n";
  texts.merges_txt = "#version: 0.2\n";
  for (const BpeMerge& m : tokenizer.merges())
    texts.merges_txt.append(keys[m.left]).append(" ").append(keys[m.right]).append("\n");
  return texts;
}

void write_tokenizer_files(const TokenizerFileTexts& texts, const std::string& dir) {
  write_file_atomically(dir + "/vocab.json", texts.vocab_json);
  write_file_atomically(dir + "/merges.txt", texts.merges_txt);
}

void copy_tokenizer_json(const std::string& from, const std::string& to) {
  std::string text;
  try {
    text = read_file(from);
  } catch (const UsageError& e) {
    throw RuntimeError(e.what());
  }
  write_file_atomically(to, text);
}

void write_vocab_and_merges(const BpeTokenizer& tokenizer, const std::string& dir) {
  write_tokenizer_files(tokenizer_file_texts(tokenizer), dir);
}

}  // namespace spmd
