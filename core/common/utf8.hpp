// core/common/utf8.hpp — making byte strings valid UTF-8 for what minfer prints.
//
// Token pieces are often parts of a character, and a prompt file or a sampled byte token can
// hold bytes that are no UTF-8 at all. Everything minfer writes as text (the stream, --json)
// goes through here, so both apply one rule: an incomplete character at the end of what is
// known so far is held back; each maximal subpart of an ill-formed sequence becomes one U+FFFD
// (the Unicode Standard's recommended practice, ch. 3 "U+FFFD Substitution of Maximal
// Subparts", which Python's errors='replace' and the WHATWG decoder follow).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace minfer::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

struct Scan {
  enum Kind { Valid, Invalid, Truncated } kind;
  size_t len;  // Valid: the character's bytes; Invalid: the maximal subpart's (>= 1);
               // Truncated: the bytes of a valid prefix that the input ends inside
};

// What starts at s[i] (i < s.size()), by the table of well-formed byte sequences
// (Unicode 3.9, table 3-7): the second byte's range depends on the lead, later ones are 80..BF.
inline Scan scan(std::string_view s, size_t i) {
  const auto c = uint8_t(s[i]);
  if (c < 0x80) return {Scan::Valid, 1};
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c == 0xE0) len = 3, lo = 0xA0;
  else if (c == 0xED) len = 3, hi = 0x9F;  // no surrogates
  else if (c >= 0xE1 && c <= 0xEF) len = 3;
  else if (c == 0xF0) len = 4, lo = 0x90;
  else if (c == 0xF4) len = 4, hi = 0x8F;  // nothing above U+10FFFF
  else if (c >= 0xF1 && c <= 0xF3) len = 4;
  else return {Scan::Invalid, 1};  // 80..C1 (continuation, overlong lead), F5..FF
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return {Scan::Truncated, k};
    const auto b = uint8_t(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return {Scan::Invalid, k};
  }
  return {Scan::Valid, len};
}

// Bytes in, valid UTF-8 out, in pieces: push() returns what is complete, holding back an
// incomplete character at the end; finish() returns what is left (a held-back prefix is one
// maximal subpart: one U+FFFD).
class Stream {
 public:
  std::string push(std::string_view bytes) {
    pending_.append(bytes);
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
      const Scan sc = scan(pending_, i);
      if (sc.kind == Scan::Truncated) break;
      if (sc.kind == Scan::Valid) out.append(pending_, i, sc.len);
      else out += kReplacement;
      i += sc.len;
    }
    pending_.erase(0, i);
    return out;
  }
  std::string finish() {
    std::string out = pending_.empty() ? "" : std::string(kReplacement);
    pending_.clear();
    return out;
  }
  bool holding() const { return !pending_.empty(); }

 private:
  std::string pending_;
};

// The whole string made valid: every maximal ill-formed subpart replaced by U+FFFD.
inline std::string sanitize(std::string_view s) {
  Stream st;
  std::string out = st.push(s);
  return out + st.finish();
}

inline bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Scan sc = scan(s, i);
    if (sc.kind != Scan::Valid) return false;
    i += sc.len;
  }
  return true;
}

}  // namespace minfer::utf8
