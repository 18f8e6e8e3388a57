// The byte <-> unicode map of GPT-2's encoder.py, built once (see byte_unicode.h).
#include "tokenizer/byte_unicode.h"

#include "tokenizer/utf8.h"

namespace spmd {
namespace {

bool printable_latin1(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::array<char32_t, 256> make_map() {
  std::array<char32_t, 256> map{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) map[b] = printable_latin1(b) ? char32_t(b) : next++;
  return map;
}

// Inverse over U+0000..U+01FF (the map's image lies there); -1 = not a byte's image.
std::array<int16_t, 512> make_inverse() {
  std::array<int16_t, 512> inv{};
  inv.fill(-1);
  const auto& map = byte_to_unicode();
  for (int b = 0; b < 256; ++b) inv[map[b]] = static_cast<int16_t>(b);
  return inv;
}

}  // namespace

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> map = make_map();
  return map;
}

std::string bytes_to_unicode_string(std::string_view bytes) {
  const auto& map = byte_to_unicode();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8_append(out, map[b]);
  return out;
}

bool unicode_string_to_bytes(std::string_view text, std::string& out) {
  static const std::array<int16_t, 512> inv = make_inverse();
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t pos = 0; pos < text.size();) {
    char32_t cp = 0;
    size_t used = utf8_decode_one(p + pos, text.size() - pos, cp);
    if (used == 0 || cp >= inv.size() || inv[cp] < 0) return false;
    out += static_cast<char>(inv[cp]);
    pos += used;
  }
  return true;
}

}  // namespace spmd
