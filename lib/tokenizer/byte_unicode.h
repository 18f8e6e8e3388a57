// GPT-2's byte <-> unicode map: every byte gets a printable code point, so byte-level tokens can
// be stored as JSON strings in vocab.json / merges.txt. Printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') map to themselves; the other 68 bytes map, in byte order, to U+0100...
// (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A, as in GPT-2's files).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace spmd {

// Code point of each byte.
const std::array<char32_t, 256>& byte_to_unicode();

// Raw bytes -> their byte-level string (UTF-8).
std::string bytes_to_unicode_string(std::string_view bytes);

// Byte-level string -> raw bytes; false if `text` is not valid UTF-8 or holds a code point that
// is not the image of a byte (then `out` is unspecified).
bool unicode_string_to_bytes(std::string_view text, std::string& out);

}  // namespace spmd
