// Compiling split patterns (see split_pattern.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/split_pattern.h"

#include <pcre2.h>

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/pretokenize.h"
#include "util/error.h"

namespace spmd {
namespace {

constexpr const char* kGpt2Source =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr const char* kWhiteSpace = "\\t-\\r\\x{85}\\p{Z}";  // Unicode White_Space

pcre2_code* compile_or_throw(const std::string& pcre, const std::string& origin) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset,
                                   nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw UsageError(fmt::format("{}: the pattern does not compile (PCRE2, at offset {} of {}): {}",
                                 origin, offset, pcre, reinterpret_cast<const char*>(msg)));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT support the interpreter runs it
  return code;
}

// spmd-prepare cuts its input after a '\n' between two printable ASCII characters; a pattern
// whose words reach across such a cut would encode differently in batches. Probes every pair.
void check_cuts_are_safe(const std::shared_ptr<const SplitPattern>& pattern, const std::string& origin) {
  Pretokenizer pre(pattern);
  std::vector<std::string_view> whole, parts;
  std::string text;
  for (char a = '!'; a <= '~'; ++a)
    for (char b = '!'; b <= '~'; ++b) {
      text = {a, a, '\n', b, b};
      whole.clear();
      parts.clear();
      pre.split(text, whole);
      pre.split(std::string_view(text).substr(0, 3), parts);
      pre.split(std::string_view(text).substr(3), parts);
      SPMD_CHECK(whole.size() == parts.size() &&
                     std::equal(whole.begin(), whole.end(), parts.begin(),
                                [](std::string_view x, std::string_view y) { return x.size() == y.size(); }),
                 "{}: the pattern matches across the line break of {}; spmd-prepare cuts its input "
                 "after a '\\n' between printable characters and needs patterns that never do",
                 origin, nlohmann::json(text).dump());
    }
}

}  // namespace

std::string white_space_as_tokenizers(const std::string& pattern, const std::string& origin) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : fmt::format("[{}]", kWhiteSpace);
      } else if (e == 'S') {
        SPMD_CHECK(!in_class, "{}: \\S inside a character class is not supported", origin);
        out += fmt::format("[^{}]", kWhiteSpace);
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    out += c;
    if (c == '[' && !in_class) {
      in_class = true;
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];  // a literal ']'
    } else if (c == ']' && in_class) {
      in_class = false;
    }
  }
  return out;
}

std::shared_ptr<const SplitPattern> SplitPattern::gpt2() {
  static const std::shared_ptr<const SplitPattern> pattern(new SplitPattern(
      kGpt2Source, compile_or_throw(white_space_as_tokenizers(kGpt2Source, "GPT-2's pattern"),
                                    "GPT-2's pattern")));
  return pattern;
}

std::shared_ptr<const SplitPattern> SplitPattern::compile(const std::string& pattern,
                                                          const std::string& origin) {
  if (pattern == kGpt2Source) return gpt2();
  std::shared_ptr<const SplitPattern> compiled(
      new SplitPattern(pattern, compile_or_throw(white_space_as_tokenizers(pattern, origin), origin)));
  check_cuts_are_safe(compiled, origin);
  return compiled;
}

SplitPattern::~SplitPattern() { pcre2_code_free(code_); }

bool SplitPattern::is_gpt2() const { return source_ == kGpt2Source; }

}  // namespace spmd
