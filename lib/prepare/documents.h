// The documents in a batch: a text file is one document (its batches are pieces of it); each
// line of a JSON Lines file is one, the string at `json_key` (other fields are ignored, blank
// lines skipped). A line that is not a JSON object with a string at that key is a UsageError
// naming file:line, or, with skip_bad_lines, counted and left out.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "prepare/input_batches.h"

namespace spmd {

struct DocumentOptions {
  std::string json_key = "text";
  bool skip_bad_lines = false;
};

struct DocumentSegment {
  std::string text;
  bool starts_document = false;  // false: it continues the previous segment's document
};

struct BatchDocuments {
  std::vector<DocumentSegment> segments;
  int64_t bad_lines = 0;  // malformed JSON lines left out (skip_bad_lines)
};

// `files` names the batch's file in messages.
BatchDocuments split_documents(InputBatch& batch, const std::vector<std::string>& files,
                               const DocumentOptions& options);

// True when `text` is entirely valid UTF-8 (strict, as utf8.h).
bool is_valid_utf8(std::string_view text);

}  // namespace spmd
