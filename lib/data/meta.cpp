// Reading, writing and applying a prepared dataset's vocabulary (see meta.h).
#include "data/meta.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace spmd {
namespace {

constexpr const char* kFormat = "spmd-prepare/1";

// The single code point that `s` encodes, or UsageError.
char32_t single_code_point(const std::string& s, const std::string& origin) {
  char32_t cp = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t used = s.empty() ? 0 : utf8_decode_one(p, s.size(), cp);
  SPMD_CHECK(used != 0 && used == s.size(),
             "{}: vocabulary entry {} is not exactly one UTF-8 character",
             origin, nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  return cp;
}

// The "tokenizer" entry of a BPE meta; vocab_size is the tokenizer's (checked in read_meta).
void bpe_from_json(const nlohmann::json& j, const std::string& origin, DatasetMeta& meta) {
  meta.vocab = VocabKind::kBpe;
  const auto& t = j.at("tokenizer");
  if (t.contains("tokenizer_json")) {
    meta.tokenizer_json = t.at("tokenizer_json").get<std::string>();
  } else {
    meta.vocab_file = t.at("vocab").get<std::string>();
    meta.merges_file = t.at("merges").get<std::string>();
  }
  meta.eot_token = t.at("eot_token").get<int64_t>();
  meta.tokenizer_source = t.value("source", "");
  // Names only: the files must sit beside meta.json (tokenizer_files() relies on it).
  for (const std::string& name : tokenizer_files(meta))
    SPMD_CHECK(!name.empty() && name.find('/') == std::string::npos,
               "{}: tokenizer file {} must be a plain file name", origin, name);
  meta.vocab_size = j.at("vocab_size").get<int64_t>();
}

// The width "dtype" names, or nullopt without one; UsageError for any other value.
std::optional<TokenWidth> dtype_of(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object() || !j.contains("dtype")) return std::nullopt;
  const auto& dtype = j.at("dtype");
  for (TokenWidth w : {TokenWidth::kU16, TokenWidth::kU32})
    if (dtype == dtype_name(w)) return w;
  throw UsageError(fmt::format("{}: dtype {} is not a token type spmd-train reads (\"uint16\" or \"uint32\")",
                               origin, dtype.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

nlohmann::json parse_json_file(const std::string& path) {
  std::ifstream in(path);
  SPMD_CHECK(in.good(), "{}: cannot open dataset meta", path);
  try {
    nlohmann::json j;
    in >> j;
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

}  // namespace

nlohmann::json meta_to_json(const DatasetMeta& meta) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["dtype"] = dtype_name(meta.token_width);
  if (meta.vocab == VocabKind::kByte) {
    j["vocabulary"] = "byte";
  } else if (meta.vocab == VocabKind::kBpe) {
    j["vocabulary"] = "bpe";
    j["tokenizer"] = {{"eot_token", meta.eot_token}, {"source", meta.tokenizer_source}};
    if (!meta.tokenizer_json.empty()) {
      j["tokenizer"]["tokenizer_json"] = meta.tokenizer_json;
    } else {
      j["tokenizer"]["vocab"] = meta.vocab_file;
      j["tokenizer"]["merges"] = meta.merges_file;
    }
  } else {
    nlohmann::json chars = nlohmann::json::array();
    for (char32_t cp : meta.chars) {
      std::string s;
      utf8_append(s, cp);
      chars.push_back(s);
    }
    j["vocabulary"] = chars;
  }
  j["vocab_size"] = meta.vocab_size;
  j["train_tokens"] = meta.train_tokens;
  j["val_tokens"] = meta.val_tokens;
  j["val_fraction"] = meta.val_fraction;
  j["train"] = meta.train_file;
  j["val"] = meta.val_file;
  if (meta.shard_tokens > 0) j["shard_tokens"] = meta.shard_tokens;
  j["documents"] = meta.documents;
  j["skipped_bad_lines"] = meta.skipped_bad_lines;
  j["non_utf8_documents"] = meta.non_utf8_documents;
  j["sources"] = meta.sources;
  if (meta.sft.present) {
    const SftMeta& f = meta.sft;
    j["fine_tuning"] = {{"format", f.format}, {"train_on", f.train_on}, {"block_size", f.block_size},
                        {"packed", f.packed}, {"document_end", f.document_end}, {"examples", f.examples},
                        {"dropped_longer_than_block", f.dropped_long}, {"train_targets", f.train_targets},
                        {"val_targets", f.val_targets}};
    if (!f.chat_family.empty()) j["fine_tuning"]["chat_template"] = f.chat_family;
    if (f.default_system) j["fine_tuning"]["default_system"] = *f.default_system;
  }
  return j;
}

std::string targets_path_of(const std::string& token_path) {
  const std::string bin = ".bin";
  const bool ends_bin = token_path.size() >= bin.size() && token_path.compare(token_path.size() - bin.size(), bin.size(), bin) == 0;
  return (ends_bin ? token_path.substr(0, token_path.size() - bin.size()) : token_path) + ".targets.bin";
}

namespace {
// A meta.json spmd-prepare did not write (another tool's, or edited by hand), and what to do.
std::string not_ours(const std::string& origin, const std::string& why) {
  return fmt::format("{}: not a dataset meta written by spmd-prepare ({}); prepare the data with spmd-prepare "
                     "(docs/data.md), or move this meta.json away to train on the token files alone",
                     origin, why);
}

// nlohmann's message without its "[json.exception.type_error.302] " prefix.
std::string json_problem(const nlohmann::json::exception& e) {
  std::string text = e.what();
  const auto end = text.find("] ");
  return text.rfind("[json.exception.", 0) == 0 && end != std::string::npos ? text.substr(end + 2) : text;
}
}  // namespace

DatasetMeta meta_from_json(const nlohmann::json& j, const std::string& origin) {
  DatasetMeta meta;
  try {
    SPMD_CHECK(j.is_object() && j.contains("vocabulary"), "{}", not_ours(origin, "it has no \"vocabulary\""));
    const auto& vocab = j.at("vocabulary");
    if (vocab == "bpe") {
      bpe_from_json(j, origin, meta);
    } else if (vocab.is_string()) {
      SPMD_CHECK(vocab.get<std::string>() == "byte",
                 "{}: vocabulary must be \"byte\", \"bpe\" or a list of characters", origin);
      meta.vocab = VocabKind::kByte;
      meta.vocab_size = 256;
    } else {
      SPMD_CHECK(vocab.is_array(),
                 "{}: vocabulary must be \"byte\", \"bpe\" or a list of characters", origin);
      meta.vocab = VocabKind::kChar;
      for (const auto& entry : vocab)
        meta.chars.push_back(single_code_point(entry.get<std::string>(), origin));
      meta.vocab_size = static_cast<int64_t>(meta.chars.size());
      // encode() looks characters up by binary search.
      SPMD_CHECK(std::adjacent_find(meta.chars.begin(), meta.chars.end(),
                                    std::greater_equal<char32_t>()) == meta.chars.end(),
                 "{}: vocabulary must list characters sorted by code point, each once", origin);
    }
    SPMD_CHECK(j.at("vocab_size").get<int64_t>() == meta.vocab_size,
               "{}: vocab_size {} does not match the {} vocabulary entries", origin,
               j.at("vocab_size").get<int64_t>(), meta.vocab_size);
    // A meta.json of before uint32 tokens says "uint16", as does one without a dtype.
    meta.token_width = dtype_of(j, origin).value_or(TokenWidth::kU16);
    SPMD_CHECK(meta.vocab_size <= max_token_id(meta.token_width) + 1,
               "{}: vocab_size {} does not fit dtype {} (ids up to {})", origin, meta.vocab_size,
               dtype_name(meta.token_width), max_token_id(meta.token_width));
    meta.train_tokens = j.value("train_tokens", int64_t{0});
    meta.val_tokens = j.value("val_tokens", int64_t{0});
    meta.val_fraction = j.value("val_fraction", 0.1);
    meta.sources = j.value("sources", std::vector<std::string>{});
    meta.train_file = j.value("train", std::string("train.bin"));
    meta.val_file = j.value("val", std::string("val.bin"));
    meta.shard_tokens = j.value("shard_tokens", int64_t{0});
    meta.documents = j.value("documents", int64_t{0});
    meta.skipped_bad_lines = j.value("skipped_bad_lines", int64_t{0});
    meta.non_utf8_documents = j.value("non_utf8_documents", int64_t{0});
    if (j.contains("fine_tuning")) {
      const auto& f = j.at("fine_tuning");
      meta.sft.present = true;
      meta.sft.format = f.at("format").get<std::string>();
      meta.sft.train_on = f.at("train_on").get<std::string>();
      meta.sft.block_size = f.at("block_size").get<int64_t>();
      meta.sft.packed = f.value("packed", true);
      meta.sft.document_end = f.at("document_end").get<int64_t>();
      meta.sft.chat_family = f.value("chat_template", std::string());
      if (f.contains("default_system")) meta.sft.default_system = f.at("default_system").get<std::string>();
      meta.sft.examples = f.value("examples", int64_t{0});
      meta.sft.dropped_long = f.value("dropped_longer_than_block", int64_t{0});
      meta.sft.train_targets = f.value("train_targets", int64_t{0});
      meta.sft.val_targets = f.value("val_targets", int64_t{0});
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(not_ours(origin, json_problem(e)));
  }
  return meta;
}

DatasetMeta read_meta(const std::string& path) {
  DatasetMeta meta = meta_from_json(parse_json_file(path), path);
  if (meta.vocab == VocabKind::kBpe) {
    const auto dir = std::filesystem::path(path).parent_path();
    meta.bpe = std::make_shared<const BpeTokenizer>(
        meta.tokenizer_json.empty() ? read_vocab_and_merges((dir / meta.vocab_file).string(),
                                                            (dir / meta.merges_file).string())
                                    : read_tokenizer_json((dir / meta.tokenizer_json).string()));
    SPMD_CHECK(meta.bpe->vocab_size() == meta.vocab_size && meta.bpe->eot_id() == meta.eot_token,
               "{}: vocab_size {} and eot_token {} do not match {} ({} ids, eot {})", path,
               meta.vocab_size, meta.eot_token, tokenizer_files(meta)[1], meta.bpe->vocab_size(),
               meta.bpe->eot_id());
  }
  return meta;
}

SftMeta read_meta_fine_tuning(const std::string& path) {
  const nlohmann::json j = parse_json_file(path);
  if (!j.is_object() || !j.contains("fine_tuning")) return SftMeta{};
  return meta_from_json(j, path).sft;
}

std::optional<TokenWidth> meta_dtype(const std::string& path) { return dtype_of(parse_json_file(path), path); }

std::vector<std::string> tokenizer_files(const DatasetMeta& meta) {
  if (meta.vocab != VocabKind::kBpe) return {"meta.json"};
  if (!meta.tokenizer_json.empty()) return {"meta.json", meta.tokenizer_json};
  return {"meta.json", meta.vocab_file, meta.merges_file};
}

// The BPE tokenizer of a meta, or UsageError when it was built by hand without one.
static const BpeTokenizer& bpe_of(const DatasetMeta& meta) {
  SPMD_CHECK(meta.bpe != nullptr, "BPE dataset meta without its tokenizer (load it with read_meta)");
  return *meta.bpe;
}

std::string decode(const DatasetMeta& meta, const std::vector<int64_t>& tokens) {
  if (meta.vocab == VocabKind::kBpe) return bpe_of(meta).decode(tokens);
  std::string out;
  out.reserve(tokens.size());
  for (int64_t id : tokens) {
    SPMD_CHECK(id >= 0 && id < meta.vocab_size, "token id {} is outside the vocabulary of {}", id,
               meta.vocab_size);
    if (meta.vocab == VocabKind::kByte) out += static_cast<char>(id);
    else utf8_append(out, meta.chars[static_cast<size_t>(id)]);
  }
  return out;
}

std::vector<int64_t> encode(const DatasetMeta& meta, std::string_view text) {
  std::vector<int64_t> ids;
  if (meta.vocab == VocabKind::kBpe) {
    std::vector<int32_t> bpe_ids = bpe_of(meta).encode(text);
    return {bpe_ids.begin(), bpe_ids.end()};
  }
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  if (meta.vocab == VocabKind::kByte) {
    ids.assign(p, p + text.size());
    return ids;
  }
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = 0;
    size_t used = utf8_decode_one(p + pos, text.size() - pos, cp);
    SPMD_CHECK(used != 0, "invalid UTF-8 at byte offset {} of the text to encode", pos);
    auto it = std::lower_bound(meta.chars.begin(), meta.chars.end(), cp);
    SPMD_CHECK(it != meta.chars.end() && *it == cp,
               "character U+{:04X} at byte offset {} is not in the vocabulary",
               static_cast<uint32_t>(cp), pos);
    ids.push_back(it - meta.chars.begin());
    pos += used;
  }
  return ids;
}

}  // namespace spmd
