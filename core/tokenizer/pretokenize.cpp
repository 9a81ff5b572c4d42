// core/tokenizer/pretokenize.cpp — the regex splits of byte-level BPE, hand-written.
//
// Each pattern is an alternation tried in order at the current position; the first
// alternative that matches wins and is greedy, with the backtracking the regex would do
// spelled out. Patterns (as the tokenizers publish them):
//   gpt-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  as llama3 with \p{N} (one digit per piece)
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

namespace minfer::tokenizer {
namespace {

struct Cp {
  uint32_t c;
  size_t byte, len;  // where it sits in the text
};

std::vector<Cp> decode_with_offsets(const std::string &s) {
  std::vector<Cp> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_len(uint8_t(s[i]));
    const auto one = utf8_decode(s.substr(i, std::min(n, s.size() - i)));
    if (one.size() == 1 && n <= s.size() - i) {
      out.push_back({one[0], i, n});
      i += n;
    } else {
      out.push_back({0xFFFD, i, 1});  // an invalid byte: its own piece of one byte
      i += 1;
    }
  }
  return out;
}

class Splitter {
 public:
  Splitter(const std::vector<Cp> &cps, Pre pre) : c_(cps), n_(cps.size()), pre_(pre) {}

  // Length (in code points) of the piece starting at i.
  size_t match(size_t i) const {
    if (size_t m = contraction(i)) return m;
    if (pre_ == Pre::Gpt2) {
      if (size_t m = opt_space_then(i, [&](size_t k) { return L(k); })) return m;
      if (size_t m = opt_space_then(i, [&](size_t k) { return N(k); })) return m;
      if (size_t m = opt_space_then(i, [&](size_t k) { return other(k); })) return m;
    } else {
      if (size_t m = prefixed_letters(i)) return m;
      if (N(i)) {
        size_t j = i + 1;
        const size_t max = pre_ == Pre::Llama3 ? 3 : 1;
        while (j < n_ && j - i < max && N(j)) ++j;
        return j - i;
      }
      if (size_t m = punct_then_newlines(i)) return m;
      if (size_t m = space_then_newlines(i)) return m;
    }
    if (S(i)) {
      size_t j = i;
      while (j < n_ && S(j)) ++j;
      if (j == n_ || j - i == 1) return j - i;  // \s+(?!\S) to the end, or \s+ of one
      return j - i - 1;                          // leave the last space to the next piece
    }
    return 1;  // unreachable for valid classes; keeps the loop finite
  }

 private:
  uint32_t at(size_t k) const { return k < n_ ? c_[k].c : 0; }
  bool L(size_t k) const { return k < n_ && is_letter(c_[k].c); }
  bool N(size_t k) const { return k < n_ && is_number(c_[k].c); }
  bool S(size_t k) const { return k < n_ && is_whitespace(c_[k].c); }
  bool other(size_t k) const { return k < n_ && !S(k) && !L(k) && !N(k); }
  bool newline(size_t k) const { return k < n_ && (c_[k].c == '\r' || c_[k].c == '\n'); }

  size_t contraction(size_t i) const {
    if (at(i) != '\'' || i + 1 >= n_) return 0;
    const bool fold = pre_ != Pre::Gpt2;  // llama3/qwen2 match case-insensitively
    auto lower = [&](size_t k) { const uint32_t x = at(k); return fold && x >= 'A' && x <= 'Z' ? x + 32 : x; };
    const uint32_t a = lower(i + 1), b = i + 2 < n_ ? lower(i + 2) : 0;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    return 0;
  }

  // " ?X+" for a class X.
  template <class Pred>
  size_t opt_space_then(size_t i, Pred in_class) const {
    size_t j = i + (at(i) == ' ' ? 1 : 0);
    if (!in_class(j)) return 0;
    while (in_class(j)) ++j;
    return j - i;
  }

  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t prefixed_letters(size_t i) const {
    size_t j = i;
    if (!newline(i) && !L(i) && !N(i) && i < n_ && L(i + 1)) j = i + 1;
    if (!L(j)) return 0;
    while (L(j)) ++j;
    return j - i;
  }

  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t punct_then_newlines(size_t i) const {
    size_t j = i + (at(i) == ' ' ? 1 : 0);
    if (!other(j)) return 0;
    while (other(j)) ++j;
    while (newline(j)) ++j;
    return j - i;
  }

  // \s*[\r\n]+ : through the last newline of the whitespace run starting at i.
  size_t space_then_newlines(size_t i) const {
    size_t j = i, end = 0;
    while (S(j)) {
      if (newline(j)) end = j + 1;
      ++j;
    }
    return end ? end - i : 0;
  }

  const std::vector<Cp> &c_;
  size_t n_;
  Pre pre_;
};

}  // namespace

std::vector<std::string> pre_tokenize(Pre pre, const std::string &text) {
  const std::vector<Cp> cps = decode_with_offsets(text);
  Splitter sp(cps, pre);
  std::vector<std::string> pieces;
  for (size_t i = 0; i < cps.size();) {
    const size_t m = sp.match(i);
    const size_t begin = cps[i].byte, end = cps[i + m - 1].byte + cps[i + m - 1].len;
    pieces.push_back(text.substr(begin, end - begin));
    i += m;
  }
  return pieces;
}

}  // namespace minfer::tokenizer
