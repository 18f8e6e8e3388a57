// PCRE2 matching of a split pattern over text (see pretokenize.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#include <pcre2.h>

#include <algorithm>

#include "util/error.h"

namespace spmd {

struct Pretokenizer::State {
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~State() {
    pcre2_match_data_free(match);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

Pretokenizer::Pretokenizer(std::shared_ptr<const SplitPattern> pattern)
    : pattern_(std::move(pattern)), state_(std::make_unique<State>()) {
  const pcre2_code* code = pattern_->code();
  state_->match = pcre2_match_data_create_from_pattern(code, nullptr);
  state_->context = pcre2_match_context_create(nullptr);
  // Long whitespace or letter runs need more than the default 32 KiB JIT stack.
  state_->jit_stack = pcre2_jit_stack_create(32 << 10, 8 << 20, nullptr);
  if (!state_->match || !state_->context || !state_->jit_stack)
    throw RuntimeError("PCRE2: out of memory creating match data");
  pcre2_jit_stack_assign(state_->context, nullptr, state_->jit_stack);
}

Pretokenizer::~Pretokenizer() = default;

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& words) {
  const pcre2_code* code = pattern_->code();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // NOTEMPTY: a file's pattern may match the empty string somewhere; words are never empty.
    int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NOTEMPTY, state_->match, state_->context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      words.push_back(text.substr(pos));  // trailing invalid UTF-8
      return;
    }
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw RuntimeError(fmt::format("PCRE2 match failed at byte offset {}: {}", pos,
                                     reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state_->match);
    SPMD_ASSERT(ovector[1] > ovector[0], "empty pre-token match at byte offset {}", ovector[0]);
    if (ovector[0] > pos) words.push_back(text.substr(pos, ovector[0] - pos));  // invalid UTF-8
    words.push_back(text.substr(ovector[0], ovector[1] - ovector[0]));
    pos = ovector[1];
  }
}

size_t next_safe_cut(std::string_view text, size_t from) {
  auto graphic = [&](size_t i) {
    const auto c = static_cast<unsigned char>(text[i]);
    return c > 0x20 && c < 0x7F;
  };
  for (size_t p = std::max<size_t>(from, 2); p < text.size(); ++p)
    if (text[p - 1] == '\n' && graphic(p) && graphic(p - 2)) return p;
  return text.size();
}

}  // namespace spmd
