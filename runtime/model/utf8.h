// UTF-8 as the tokenizer reads and writes it: lenient decoding (an invalid byte is U+FFFD of
// length 1) with each code point's byte offset, and encoding. Private to runtime/ (and its tests:
// tests/runtime/tokenizer_oracle_test.cpp encodes with the tokenizer's own codec).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pig::runtime::utf8 {

struct Utf8Text {
  std::vector<uint32_t> cps;
  std::vector<size_t> offs; // byte offset of each code point, plus the end
};

inline Utf8Text DecodeUtf8(std::string_view s) {
  Utf8Text t;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    uint32_t cp = 0xFFFD;
    if (c < 0x80) {
      cp = c;
    } else {
      const size_t want = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (want && i + want <= s.size()) {
        uint32_t v = c & (0x7F >> want);
        bool ok = true;
        for (size_t k = 1; k < want; ++k) {
          const auto cc = static_cast<unsigned char>(s[i + k]);
          if ((cc & 0xC0) != 0x80)
            ok = false;
          v = v << 6 | (cc & 0x3F);
        }
        if (ok)
          cp = v, len = want;
      }
    }
    t.cps.push_back(cp);
    t.offs.push_back(i);
    i += len;
  }
  t.offs.push_back(s.size());
  return t;
}

inline void AppendUtf8(std::string &out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6);
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | cp >> 12);
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | cp >> 18);
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

} // namespace pig::runtime::utf8
