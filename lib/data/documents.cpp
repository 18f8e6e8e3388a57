// Splitting a batch into documents (see documents.h).
#include "data/documents.h"

#include <nlohmann/json.hpp>

#include "data/utf8.h"
#include "util/error.h"

namespace spmd {
namespace {

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// The document of one JSON line, or the reason it has none.
bool parse_line(std::string_view line, const std::string& key, std::string& text,
                std::string& why) {
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (j.is_discarded()) {
    why = is_valid_utf8(line) ? "not valid JSON" : "not valid JSON (JSON text must be UTF-8)";
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
  text = std::move(it->get_ref<std::string&>());
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
