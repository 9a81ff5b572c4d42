// core/tokenizer/pretokenize.cpp — the regex splits of byte-level BPE, hand-written.
//
// Each pattern is an alternation tried in order at the current position; the first
// alternative that matches wins and is greedy, with the backtracking the regex would do
// spelled out. Patterns (as the tokenizers publish them):
//   gpt-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  as llama3 with \p{N} (one digit per piece)
//   gpt-4o: [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*
//           |\s*[\r\n]+|\s+(?!\S)|\s+   as llama.cpp runs it: U a letter not a-z, W a letter
//           not A-Z (its stand-ins for \p{Lu}... and \p{Ll}...), C an optional contraction ('s 't
//           're 've 'm 'll 'd, any case)
//   tekken: gpt-4o without the contractions, with \p{N} (one digit per piece)
//   smollm: \p{N} first (one digit per piece), then gpt-2 on what is between
//   deepseek-v3, three passes, each splitting the pieces of the one before (what a pass does
//           not match stays a piece of its own): \p{N}{1,3}; then [一-龥぀-ゟ゠-ヿ]+; then
//           [!-/:-@[-`{-~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*
//           |\s*[\r\n]+|\s+(?!\S)|\s+
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

// The patterns a pre-tokenizer runs, in order (most run one).
enum class Pass { Gpt2, Llama3, Qwen2, Gpt4o, Tekken, Digit, Digits3, Cjk, DeepseekV3 };

std::vector<Pass> passes(Pre pre) {
  switch (pre) {
    case Pre::Gpt2: return {Pass::Gpt2};
    case Pre::Llama3: return {Pass::Llama3};
    case Pre::Qwen2: return {Pass::Qwen2};
    case Pre::Gpt4o: return {Pass::Gpt4o};
    case Pre::Tekken: return {Pass::Tekken};
    case Pre::Smollm: return {Pass::Digit, Pass::Gpt2};
    case Pre::DeepseekV3: return {Pass::Digits3, Pass::Cjk, Pass::DeepseekV3};
  }
  return {Pass::Gpt2};
}

class Splitter {
 public:
  // Matches within code points [.., end): a piece of an earlier pass is the whole text to a
  // later one (a lookahead sees its end as the text's end).
  Splitter(const std::vector<Cp> &cps, size_t end) : c_(cps), n_(end) {}

  // Length (in code points) of the pattern's match starting at i; 0 where it has none.
  size_t match(Pass pass, size_t i) const {
    switch (pass) {
      case Pass::Gpt2: return gpt2(i);
      case Pass::Llama3:
      case Pass::Qwen2: return llama3(i, pass == Pass::Llama3 ? 3 : 1);
      case Pass::Gpt4o:
      case Pass::Tekken: return gpt4o(i, pass == Pass::Gpt4o);
      case Pass::Digit: return N(i) ? 1 : 0;
      case Pass::Digits3: return run(i, 3, [&](size_t k) { return N(k); });
      case Pass::Cjk: return run(i, n_, [&](size_t k) { return cjk(k); });
      case Pass::DeepseekV3: return deepseek_v3(i);
    }
    return 0;
  }

 private:
  size_t gpt2(size_t i) const {
    if (size_t m = contraction(i, false)) return m;
    if (size_t m = opt_space_then(i, [&](size_t k) { return L(k); })) return m;
    if (size_t m = opt_space_then(i, [&](size_t k) { return N(k); })) return m;
    if (size_t m = opt_space_then(i, [&](size_t k) { return other(k); })) return m;
    return spaces(i);
  }

  size_t llama3(size_t i, size_t max_digits) const {
    if (size_t m = contraction(i, true)) return m;
    if (size_t m = prefixed_letters(i)) return m;
    if (size_t m = run(i, max_digits, [&](size_t k) { return N(k); })) return m;
    if (size_t m = punct_then(i, false)) return m;
    if (size_t m = space_then_newlines(i)) return m;
    return spaces(i);
  }

  size_t gpt4o(size_t i, bool contractions) const {
    if (size_t m = cased_word(i, contractions)) return m;
    if (size_t m = run(i, contractions ? 3 : 1, [&](size_t k) { return N(k); })) return m;
    if (size_t m = punct_then(i, true)) return m;
    if (size_t m = space_then_newlines(i)) return m;
    return spaces(i);
  }

  size_t deepseek_v3(size_t i) const {
    // [!-/:-@[-`{-~][A-Za-z]+: one ASCII punctuation or symbol, then ASCII letters.
    const uint32_t c = at(i);
    if (c < 0x80 && c > 0x20 && c != 0x7F && !(c >= '0' && c <= '9') && !ascii_letter(i) && ascii_letter(i + 1))
      return 1 + run(i + 1, n_, [&](size_t k) { return ascii_letter(k); });
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ (a mark both may prefix and may start the run).
    auto LM = [&](size_t k) { return L(k) || M(k); };
    const bool prefix = i < n_ && !newline(i) && !L(i) && !PS(i) && LM(i + 1);
    if (size_t m = run(i + (prefix ? 1 : 0), n_, LM)) return m + (prefix ? 1 : 0);
    //  ?[\p{P}\p{S}]+[\r\n]*
    const size_t j = i + (at(i) == ' ' && PS(i + 1) ? 1 : 0);
    if (size_t m = run(j, n_, [&](size_t k) { return PS(k); })) {
      size_t k = j + m;
      while (newline(k)) ++k;
      return k - i;
    }
    if (size_t m = space_then_newlines(i)) return m;
    return S(i) ? spaces(i) : 0;
  }

  uint32_t at(size_t k) const { return k < n_ ? c_[k].c : 0; }
  bool L(size_t k) const { return k < n_ && is_letter(c_[k].c); }
  bool N(size_t k) const { return k < n_ && is_number(c_[k].c); }
  bool M(size_t k) const { return k < n_ && is_mark(c_[k].c); }
  bool PS(size_t k) const { return k < n_ && (is_punctuation(c_[k].c) || is_symbol(c_[k].c)); }
  bool S(size_t k) const { return k < n_ && is_whitespace(c_[k].c); }
  bool other(size_t k) const { return k < n_ && !S(k) && !L(k) && !N(k); }
  bool newline(size_t k) const { return k < n_ && (c_[k].c == '\r' || c_[k].c == '\n'); }
  bool ascii_letter(size_t k) const { const uint32_t c = at(k); return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
  // gpt-4o's cased classes as llama.cpp's regex has them: "upper" any letter but a-z,
  // "lower" any letter but A-Z (so a letter without case is both).
  bool upper(size_t k) const { return L(k) && !(at(k) >= 'a' && at(k) <= 'z'); }
  bool lower(size_t k) const { return L(k) && !(at(k) >= 'A' && at(k) <= 'Z'); }
  bool cjk(size_t k) const {
    const uint32_t c = at(k);
    return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x309F) || (c >= 0x30A0 && c <= 0x30FF);
  }

  // X{1,max} for a class X: the run's length, 0 when i is not in X.
  template <class Pred>
  size_t run(size_t i, size_t max, Pred in_class) const {
    size_t j = i;
    while (j - i < max && in_class(j)) ++j;
    return j - i;
  }

  // 's 't 're 've 'm 'll 'd (fold: in any case)
  size_t contraction(size_t i, bool fold) const {
    if (at(i) != '\'' || i + 1 >= n_) return 0;
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

  // gpt-4o's two word alternatives: [^\r\n\p{L}\p{N}]?upper*lower+C? | [^\r\n\p{L}\p{N}]?upper+lower*C?
  // with the regex's backtracking: upper* gives back letters until lower+ can start.
  size_t cased_word(size_t i, bool contractions) const {
    const size_t j = !newline(i) && !L(i) && !N(i) && i < n_ && L(i + 1) ? i + 1 : i;
    if (!L(j)) return 0;
    const size_t u = run(j, n_, [&](size_t k) { return upper(k); });
    size_t end = j + u;  // the second alternative: upper+ (lower* is empty when the first failed)
    for (size_t back = u + 1; back-- > 0;)
      if (lower(j + back)) {
        end = j + back + run(j + back, n_, [&](size_t k) { return lower(k); });
        break;
      }
    if (contractions) end += contraction(end, true);
    return end - i;
  }

  //  ?[^\s\p{L}\p{N}]+[\r\n]*  (slash: [\r\n/]* after, as gpt-4o's)
  size_t punct_then(size_t i, bool slash) const {
    size_t j = i + (at(i) == ' ' ? 1 : 0);
    if (!other(j)) return 0;
    while (other(j)) ++j;
    while (newline(j) || (slash && at(j) == '/')) ++j;
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

  // \s+(?!\S)|\s+ : a whitespace run, less its last space when a non-space follows.
  size_t spaces(size_t i) const {
    if (!S(i)) return 1;  // unreachable for the single-pass patterns; keeps the loop finite
    size_t j = i;
    while (S(j)) ++j;
    if (j == n_ || j - i == 1) return j - i;
    return j - i - 1;
  }

  const std::vector<Cp> &c_;
  size_t n_;
};

}  // namespace

std::vector<std::string> pre_tokenize(Pre pre, const std::string &text) {
  const std::vector<Cp> cps = decode_with_offsets(text);
  // Pieces as code point ranges; each pass splits every piece into its matches and the runs
  // between them (as llama.cpp's regex split keeps both).
  std::vector<std::pair<size_t, size_t>> pieces = {{0, cps.size()}}, next;
  if (cps.empty()) pieces.clear();
  for (const Pass pass : passes(pre)) {
    next.clear();
    for (const auto [begin, end] : pieces) {
      const Splitter sp(cps, end);
      size_t gap = begin;
      for (size_t i = begin; i < end;) {
        const size_t m = sp.match(pass, i);
        if (m == 0) {
          ++i;
          continue;
        }
        if (gap < i) next.emplace_back(gap, i);
        next.emplace_back(i, i + m);
        gap = i += m;
      }
      if (gap < end) next.emplace_back(gap, end);
    }
    pieces.swap(next);
  }
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto [b, e] : pieces) out.push_back(text.substr(cps[b].byte, cps[e - 1].byte + cps[e - 1].len - cps[b].byte));
  return out;
}

}  // namespace minfer::tokenizer
