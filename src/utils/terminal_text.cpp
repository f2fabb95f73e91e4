#include "trainpack/utils/terminal_text.h"

#include <fmt/format.h>

namespace trainpack {

namespace {

// The length of the well-formed UTF-8 sequence that starts at `text[i]` (a byte >= 0x80), or 0
// when none does (Unicode's table 3-7: no overlong form, no surrogate, nothing above U+10FFFF).
size_t utf8_sequence(std::string_view text, size_t i) {
  const auto byte = [&text](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t len = 0;
  unsigned char low = 0x80, high = 0xbf;  // the allowed range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    len = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    len = 3;
    if (lead == 0xe0) low = 0xa0;
    if (lead == 0xed) high = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    len = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  }
  return len;
}

void escape(std::string& out, unsigned char c) { out += fmt::format("\\x{:02x}", c); }

}  // namespace

std::string terminal_safe(std::string_view text, LineFeeds line_feeds) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      const bool control = c < 0x20 || c == 0x7f;
      const bool kept = c == '\t' || (c == '\n' && line_feeds == LineFeeds::kKeep);
      if (control && !kept) {
        escape(out, c);
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    const size_t len = utf8_sequence(text, i);
    if (len == 0) {  // not UTF-8: escaped byte by byte
      escape(out, c);
      ++i;
      continue;
    }
    const bool c1 = c == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f;
    for (size_t k = 0; k < len; ++k) {
      if (c1) {
        escape(out, static_cast<unsigned char>(text[i + k]));
      } else {
        out += text[i + k];
      }
    }
    i += len;
  }
  return out;
}

}  // namespace trainpack
