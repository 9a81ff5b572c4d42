#include "tokenizer/unicode.hpp"

#include <algorithm>

namespace minfer::tokenizer {
namespace {

bool in_ranges(const CodepointRange *r, size_t n, uint32_t cp) {
  const CodepointRange *end = r + n;
  const CodepointRange *it = std::upper_bound(r, end, cp, [](uint32_t c, const CodepointRange &x) { return c < x.first; });
  return it != r && cp <= (it - 1)->last;
}

}  // namespace

bool is_letter(uint32_t cp) { return in_ranges(tables::kLetters, tables::kLetters_count, cp); }
bool is_number(uint32_t cp) { return in_ranges(tables::kNumbers, tables::kNumbers_count, cp); }
bool is_mark(uint32_t cp) { return in_ranges(tables::kMarks, tables::kMarks_count, cp); }
bool is_punctuation(uint32_t cp) { return in_ranges(tables::kPunctuation, tables::kPunctuation_count, cp); }
bool is_symbol(uint32_t cp) { return in_ranges(tables::kSymbols, tables::kSymbols_count, cp); }

bool is_whitespace(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t utf8_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

std::vector<uint32_t> utf8_decode(const std::string &s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = uint8_t(s[i]);
    const size_t n = utf8_len(b);
    bool ok = n > 1 || b < 0x80;
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (size_t k = 1; ok && k < n; ++k) {
      if (i + k >= s.size() || (uint8_t(s[i + k]) & 0xC0) != 0x80) ok = false;
      else cp = cp << 6 | (uint8_t(s[i + k]) & 0x3F);
    }
    if (ok) {
      out.push_back(cp);
      i += n;
    } else {
      out.push_back(0xFFFD);
      i += 1;
    }
  }
  return out;
}

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace minfer::tokenizer
