// Text for the BPE tests: a multi-script corpus to learn merges from, samples per script, and a
// generator of random byte strings that mixes such fragments with arbitrary (invalid) bytes.
#pragma once
#include <random>
#include <string>
#include <vector>

namespace spmd::test {

inline const std::string kMultiScriptText =
    "The quick brown fox jumps over the lazy dog. It's what we'll do; they're sure I'd've known.\n"
    "Naïve café owners in Zürich and São Paulo serve crème brûlée; Straße, façade, jalapeño.\n"
    "Ελληνικά: Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο.\n"
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.\n"
    "日本語のテキストと中文文本，还有한국어 문장도 있습니다。\n"
    "العربية: نص قصير للاختبار مع أرقام ١٢٣ و 456.\n"
    "Emoji 🎉🎭👩‍👩‍👧 and symbols ¢£€ — “quotes” «guillemets» 𝄞.\n"
    "    indented\tand\ttabbed   lines   \n\n\n  with runs of   whitespace  \u3000ideographic\n"
    "numbers 12345 3.14159 1e-9 and code: if (x != y) { return a->b; }\n";

inline const std::vector<std::string> kScriptSamples = {
    "Naïve café, crème brûlée, Ærøskøbing, Đặng Thị",
    "Ελληνικά γράμματα και αριθμοί",
    "Съешь же ещё этих мягких французских булок",
    "日本語のテキスト 中文文本 한국어 문장",
    "العربية نص قصير ١٢٣",
    "emoji 🎉🎭👩‍👩‍👧 flags 🇫🇷🇯🇵",
    "   many   spaces\t\ttabs\n\n\nnewlines \r\n\u00a0nbsp\u3000ideographic ",
    "it's they're we've I'm you'll he'd 'S 'T",
    "",
    " ",
    "\n",
};

// Random text of up to max_len fragments: sample pieces, whitespace, contractions, single
// bytes (any value, so often invalid UTF-8) and cut multi-byte characters.
inline std::string random_text(std::mt19937& rng, int max_len) {
  static const std::vector<std::string> pieces = {
      "a", "the", " fox", "'s", "'ll", "'", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000",
      "\u0085", "é", "Ω", "ё", "日本", "١٢", "🎉", "👩‍👧", "12", "!?", "--", "<|endoftext|>",
      "\xc3", "\xe6\x97", "\xf0\x9f\x8e"};
  const int n = static_cast<int>(rng() % (max_len + 1));
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (rng() % 4 == 0) s += static_cast<char>(rng() % 256);
    else s += pieces[rng() % pieces.size()];
  }
  return s;
}

}  // namespace spmd::test
