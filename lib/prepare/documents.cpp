// Splitting a batch into documents (see documents.h).
#include "prepare/documents.h"

#include <nlohmann/json.hpp>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace spmd {
namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// JSON must be UTF-8, but a corpus's documents are not always: a line with invalid bytes is parsed
// with each such byte b standing in as the private-use code point U+10FF00 + b (b >= 0x80, so
// U+10FF80..U+10FFFF: F4 8F BE|BF xx), and the document gets its bytes back afterwards; it is then
// encoded as bytes and counted, as a text file's would be. (Genuine U+10FF80..U+10FFFF characters
// on such a line would become bytes too: private-use and noncharacters, not seen in real text.)
constexpr char32_t kByteStandIn = 0x10FF00;

std::string stand_in_invalid_bytes(std::string_view line) {
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  std::string out;
  out.reserve(line.size() + 8);
  for (size_t pos = 0; pos < line.size();) {
    char32_t cp = 0;
    const size_t used = p[pos] < 0x80 ? 1 : utf8_decode_one(p + pos, line.size() - pos, cp);
    if (used == 0) {
      utf8_append(out, kByteStandIn + p[pos]);
      ++pos;
    } else {
      out.append(line.substr(pos, used));
      pos += used;
    }
  }
  return out;
}

std::string restore_invalid_bytes(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t pos = 0; pos < text.size();) {
    if (p[pos] == 0xF4 && pos + 3 < text.size() && p[pos + 1] == 0x8F && (p[pos + 2] == 0xBE || p[pos + 2] == 0xBF)) {
      out += static_cast<char>(((p[pos + 2] & 0x03) << 6) | (p[pos + 3] & 0x3F));
      pos += 4;
    } else {
      out += text[pos++];
    }
  }
  return out;
}

// The document of one JSON line, or the reason it has none.
bool parse_line(std::string_view line, const std::string& key, std::string& text,
                std::string& why) {
  const bool valid = is_valid_utf8(line);
  const std::string escaped = valid ? std::string() : stand_in_invalid_bytes(line);
  const std::string_view json_text = valid ? line : std::string_view(escaped);
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (j.is_discarded()) {
    why = "not valid JSON";
    return false;
  }
  if (!j.is_object()) {
    why = "not a JSON object";
    return false;
  }
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    why = fmt::format("no string field \"{}\" (--json-key)", key);
    return false;
  }
  text = valid ? std::move(it->get_ref<std::string&>()) : restore_invalid_bytes(it->get_ref<const std::string&>());
  return true;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t pos = 0; pos < n;) {
    if (p[pos] < 0x80) {
      ++pos;
      continue;
    }
    char32_t cp = 0;
    const size_t used = utf8_decode_one(p + pos, n - pos, cp);
    if (used == 0) return false;
    pos += used;
  }
  return true;
}

BatchDocuments split_documents(InputBatch& batch, const std::vector<std::string>& files,
                               const DocumentOptions& options) {
  BatchDocuments out;
  if (batch.format == InputFormat::kText) {
    out.segments.push_back({std::move(batch.bytes), batch.starts_file});
    return out;
  }
  const std::string_view bytes(batch.bytes);
  int64_t line_number = batch.first_line;
  for (size_t pos = 0; pos < bytes.size(); ++line_number) {
    size_t end = bytes.find('\n', pos);
    if (end == std::string_view::npos) end = bytes.size();
    const std::string_view line = bytes.substr(pos, end - pos);
    pos = end + 1;
    if (is_blank(line)) continue;
    DocumentSegment doc{"", true};
    std::string why;
    if (parse_line(line, options.json_key, doc.text, why)) {
      out.segments.push_back(std::move(doc));
      continue;
    }
    SPMD_CHECK(options.skip_bad_lines, "{}:{}: {} (--skip-bad-lines counts and skips such lines)",
               files[batch.file_index], line_number, why);
    ++out.bad_lines;
  }
  return out;
}

}  // namespace spmd
