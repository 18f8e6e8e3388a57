// A GPT-2 style tokenizer (vocab.json + merges.txt) with more ids than uint16 holds, small to
// write: the 256 bytes (ids 0..255), fillers that no text produces, then at the top the merges
// that make each of `words` one token, and <|endoftext|> last (id vocab_size - 1). Text made of
// those words encodes to ids past 65535 (the words) and below 256 (anything else).
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.h"
#include "tokenizer/byte_unicode.h"

namespace spmd::test {

inline void write_wide_tokenizer(const std::string& dir, int64_t vocab_size, const std::vector<std::string>& words) {
  // Each word merged left to right: (w0, w1) -> w0w1, (w0w1, w2) -> w0w1w2, ...
  std::vector<std::pair<std::string, std::string>> merges;
  std::set<std::string> made;
  for (const std::string& word : words)
    for (size_t k = 1; k < word.size(); ++k)
      if (made.insert(word.substr(0, k + 1)).second) merges.emplace_back(word.substr(0, k), word.substr(k, 1));
  const int64_t fillers = vocab_size - 256 - static_cast<int64_t>(merges.size()) - 1;
  if (fillers < 0) throw std::runtime_error("write_wide_tokenizer: vocab_size too small for the merges");
  nlohmann::json vocab = nlohmann::json::object();
  auto add = [&](const std::string& bytes) { vocab[bytes_to_unicode_string(bytes)] = vocab.size(); };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  for (int64_t i = 0; i < fillers; ++i) add("\x01" + std::to_string(i));  // never a word of any text here
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& [left, right] : merges) {
    add(left + right);
    merges_txt += bytes_to_unicode_string(left) + " " + bytes_to_unicode_string(right) + "\n";
  }
  vocab["<|endoftext|>"] = vocab.size();
  write_file(dir + "/vocab.json", vocab.dump());
  write_file(dir + "/merges.txt", merges_txt);
}

}  // namespace spmd::test
