#include "sampling/regex.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace minfer::sampling {

namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto &[a, b] : r)
    if (!out.empty() && a <= out.back().second + 1) out.back().second = std::max(out.back().second, b);
    else out.emplace_back(a, b);
  return out;
}

Ranges complement(const Ranges &r) {
  Ranges out;
  uint32_t from = 0;
  for (const auto &[a, b] : normalized(r)) {
    if (a > from) out.emplace_back(from, a - 1);
    from = b + 1;
  }
  if (from <= kMaxCp) out.emplace_back(from, kMaxCp);
  return out;
}

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}};

// The pattern's code points (UTF-8 decoded; a bad byte stands for itself).
std::vector<uint32_t> code_points(const std::string &s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 0 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
    uint32_t cp = n == 0 ? b : b & (0x3F >> n);
    size_t k = 1;
    for (; k <= size_t(n) && i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; ++k) cp = cp << 6 | (s[i + k] & 0x3F);
    if (k != size_t(n) + 1) cp = b, k = 1;
    out.push_back(cp);
    i += k;
  }
  return out;
}

struct Node;
using P = std::shared_ptr<const Node>;
struct Node {
  enum Kind { empty, atom, cat, alt, star, opt, plus } kind = empty;
  Ranges cls;  // atom
  std::vector<P> kids;
};

P make(Node::Kind k, std::vector<P> kids = {}, Ranges cls = {}) {
  auto n = std::make_shared<Node>();
  n->kind = k;
  n->kids = std::move(kids);
  n->cls = std::move(cls);
  return n;
}

class Parser {
 public:
  Parser(std::vector<uint32_t> s, const std::string &src) : s_(std::move(s)), src_(src) {}

  P parse() {
    std::vector<P> alts = {sequence()};
    while (at('|')) {
      ++i_;
      alts.push_back(sequence());
    }
    if (i_ < s_.size()) fail("an unmatched ')'");
    top_level_alt = alts.size() > 1;
    return alts.size() == 1 ? alts[0] : make(Node::alt, std::move(alts));
  }
  bool top_level_alt = false;  // a '|' outside every group

  [[noreturn]] void fail(const std::string &what) const { throw Error("pattern /" + src_ + "/: " + what + " is not supported"); }

 private:
  bool at(uint32_t c) const { return i_ < s_.size() && s_[i_] == c; }

  P alternatives() {
    std::vector<P> alts = {sequence()};
    while (at('|')) {
      ++i_;
      alts.push_back(sequence());
    }
    return alts.size() == 1 ? alts[0] : make(Node::alt, std::move(alts));
  }

  P sequence() {
    std::vector<P> items;
    while (i_ < s_.size() && !at('|') && !at(')')) items.push_back(quantified());
    if (items.empty()) return make(Node::empty);
    return items.size() == 1 ? items[0] : make(Node::cat, std::move(items));
  }

  // {n}, {n,}, {n,m} at i_: true with the counts (m -1: no limit); otherwise '{' is a literal.
  bool braces(size_t &n, long &m) {
    size_t k = i_ + 1;
    auto number = [&](size_t &v) {
      const size_t from = k;
      v = 0;
      while (k < s_.size() && s_[k] >= '0' && s_[k] <= '9' && v < 100000) v = v * 10 + (s_[k++] - '0');
      return k > from;
    };
    size_t lo = 0, hi = 0;
    if (!number(lo)) return false;
    m = long(lo);
    if (k < s_.size() && s_[k] == ',') {
      ++k;
      m = number(hi) ? long(hi) : -1;
    }
    if (k >= s_.size() || s_[k] != '}') return false;
    if (m >= 0 && size_t(m) < lo) fail("a count {n,m} with m below n");
    n = lo;
    i_ = k + 1;
    return true;
  }

  P quantified() {
    P a = atom();
    for (int wraps = 0;; ++wraps) {
      if (wraps > 8) fail("more than 8 quantifiers on one item");
      size_t n = 0;
      long m = 0;
      if (at('*')) ++i_, a = make(Node::star, {a});
      else if (at('+')) ++i_, a = make(Node::plus, {a});
      else if (at('?')) ++i_, a = make(Node::opt, {a});
      else if (at('{') && braces(n, m)) a = repeat(a, n, m);
      else return a;
      if (at('?')) ++i_;  // lazy: the same strings
    }
  }

  P repeat(const P &a, size_t n, long m) {
    if (n > size_t(Regex::kMaxPositions) || m > Regex::kMaxPositions) fail("a count above " + std::to_string(Regex::kMaxPositions));
    std::vector<P> items(n, a);
    if (m < 0) items.push_back(make(Node::star, {a}));
    else {
      P tail;  // (a(a(a)?)?)? for the optional ones
      for (long k = long(n); k < m; ++k) tail = make(Node::opt, {tail ? make(Node::cat, {a, tail}) : a});
      if (tail) items.push_back(tail);
    }
    if (items.empty()) return make(Node::empty);
    return items.size() == 1 ? items[0] : make(Node::cat, std::move(items));
  }

  uint32_t hex_digits(int count) {
    uint32_t v = 0;
    for (int k = 0; k < count; ++k) {
      if (i_ >= s_.size()) fail("a short \\x or \\u escape");
      const uint32_t c = s_[i_++];
      const int d = c >= '0' && c <= '9' ? int(c - '0') : c >= 'a' && c <= 'f' ? int(c - 'a' + 10) : c >= 'A' && c <= 'F' ? int(c - 'A' + 10) : -1;
      if (d < 0) fail("a bad \\x or \\u escape");
      v = v * 16 + uint32_t(d);
    }
    return v;
  }

  // After a backslash: the class it stands for (in_class: \b is a backspace there).
  Ranges escape(bool in_class) {
    if (i_ >= s_.size()) fail("a trailing backslash");
    const uint32_t c = s_[i_++];
    switch (c) {
      case 'd': return kDigit;
      case 'D': return complement(kDigit);
      case 'w': return kWord;
      case 'W': return complement(kWord);
      case 's': return kSpace;
      case 'S': return complement(kSpace);
      case 'n': return {{'\n', '\n'}};
      case 't': return {{'\t', '\t'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': {
        const uint32_t v = hex_digits(2);
        return {{v, v}};
      }
      case 'u': {
        const uint32_t v = hex_digits(4);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{'\b', '\b'}};
        fail("the word boundary \\b");
      case 'B': fail("\\B");
      case 'p':
      case 'P': fail("Unicode property classes (\\p{...})");
      case 'k': fail("named back-references (\\k<...>)");
      case 'c': fail("control escapes (\\cX)");
      default:
        if (c >= '1' && c <= '9') fail("back-references (\\1)");
        return {{c, c}};
    }
  }

  Ranges bracket() {  // after '['
    const bool negated = at('^');
    if (negated) ++i_;
    Ranges r;
    bool first = true;
    while (i_ < s_.size() && (!at(']') || first)) {
      first = false;
      Ranges item;
      if (at('\\')) ++i_, item = escape(true);
      else item = {{s_[i_], s_[i_]}}, ++i_;
      // a range a-b (not when either end is a class such as \d, or '-' ends the set)
      if (item.size() == 1 && item[0].first == item[0].second && at('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;
        Ranges to;
        if (at('\\')) ++i_, to = escape(true);
        else to = {{s_[i_], s_[i_]}}, ++i_;
        if (to.size() != 1 || to[0].first != to[0].second) fail("a range ending in a class");
        if (to[0].first < item[0].first) fail("a range out of order");
        item = {{item[0].first, to[0].first}};
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    if (!at(']')) fail("an unclosed '['");
    ++i_;
    return negated ? complement(r) : normalized(r);
  }

  P atom() {
    if (i_ >= s_.size()) fail("an empty item");
    const uint32_t c = s_[i_++];
    switch (c) {
      case '(': {
        if (++depth_ > 64) fail("groups nested deeper than 64");
        if (at('?')) {
          if (i_ + 1 < s_.size() && s_[i_ + 1] == ':') i_ += 2;
          else if (i_ + 2 < s_.size() && s_[i_ + 1] == '<' && s_[i_ + 2] != '=' && s_[i_ + 2] != '!') {
            while (i_ < s_.size() && s_[i_] != '>') ++i_;  // a named group: the name does not matter here
            ++i_;
          } else fail("look-arounds ((?=, (?!, (?<=, (?<!)");
        }
        P a = alternatives();
        if (!at(')')) fail("an unclosed '('");
        ++i_;
        --depth_;
        return a;
      }
      case '[': return make(Node::atom, {}, bracket());
      case '.': return make(Node::atom, {}, complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '\\': return make(Node::atom, {}, escape(false));
      case '^':
      case '$': fail("an anchor ('^', '$') inside the pattern");
      case '*':
      case '+':
      case '?': fail("a quantifier with nothing to repeat");
      default: return make(Node::atom, {}, {{c, c}});
    }
  }

  std::vector<uint32_t> s_;
  size_t i_ = 0;
  int depth_ = 0;  // groups open
  const std::string &src_;
};

}  // namespace

bool Regex::Class::contains(uint32_t cp) const {
  for (const auto &[a, b] : ranges)
    if (cp >= a && cp <= b) return true;
  return false;
}

bool Regex::Class::meets(uint32_t lo, uint32_t hi) const {
  for (const auto &[a, b] : ranges)
    if (a <= hi && lo <= b) return true;
  return false;
}

class RegexBuilder {
 public:
  explicit RegexBuilder(Regex &r) : r_(r) {}
  struct Info {
    Regex::Set first, last;
    bool nullable = false;
  };

  Info build(const Node &n) {
    Info out;
    switch (n.kind) {
      case Node::empty: out.nullable = true; return out;
      case Node::atom: {
        if (int(r_.classes_.size()) >= Regex::kMaxPositions)
          throw Error("pattern /" + r_.source_ + "/: more than " + std::to_string(Regex::kMaxPositions) +
                      " character positions once counts are expanded; shorten it");
        const int p = int(r_.classes_.size());
        r_.classes_.push_back({n.cls});
        r_.follow_.push_back({});
        out.first.add(p);
        out.last.add(p);
        return out;
      }
      case Node::cat: {
        out.nullable = true;
        for (const P &k : n.kids) {
          const Info b = build(*k);
          each(out.last, [&](int p) { r_.follow_[size_t(p)] |= b.first; });
          if (out.nullable) out.first |= b.first;
          out.last = b.nullable ? (out.last |= b.last) : b.last;
          out.nullable = out.nullable && b.nullable;
        }
        return out;
      }
      case Node::alt:
        for (const P &k : n.kids) {
          const Info b = build(*k);
          out.first |= b.first, out.last |= b.last, out.nullable = out.nullable || b.nullable;
        }
        return out;
      case Node::star:
      case Node::plus:
      case Node::opt: {
        out = build(*n.kids[0]);
        if (n.kind != Node::opt) each(out.last, [&](int p) { r_.follow_[size_t(p)] |= out.first; });
        if (n.kind != Node::plus) out.nullable = true;
        return out;
      }
    }
    return out;
  }

  template <typename F>
  static void each(const Regex::Set &s, F f) {
    for (int w = 0; w < 2; ++w)
      for (uint64_t bits = s.w[w]; bits; bits &= bits - 1) f(w * 64 + __builtin_ctzll(bits));
  }

 private:
  Regex &r_;
};

std::shared_ptr<const Regex> Regex::compile(const std::string &pattern) {
  auto r = std::make_shared<Regex>();
  r->source_ = pattern;
  std::vector<uint32_t> cps = code_points(pattern);
  const bool head = !cps.empty() && cps.front() == '^';
  if (head) cps.erase(cps.begin());
  size_t slashes = 0;  // a final '$' escaped by an odd run of backslashes is a literal
  if (!cps.empty())
    for (size_t k = cps.size() - 1; k > 0 && cps[k - 1] == '\\'; --k) ++slashes;
  const bool tail = !cps.empty() && cps.back() == '$' && slashes % 2 == 0;
  if (tail) cps.pop_back();
  Parser parser(std::move(cps), pattern);
  P ast = parser.parse();
  if ((head || tail) && parser.top_level_alt) parser.fail("'^' or '$' around a top-level '|' (write ^(a|b)$)");
  const P any = make(Node::star, {make(Node::atom, {}, {{0, kMaxCp}})});  // JSON Schema patterns match anywhere
  if (!head) ast = make(Node::cat, {any, ast});
  if (!tail) ast = make(Node::cat, {ast, any});
  RegexBuilder b(*r);
  const RegexBuilder::Info info = b.build(*ast);
  r->first_ = info.first;
  r->last_ = info.last;
  r->nullable_ = info.nullable;
  return r;
}

Regex::Set Regex::next_of(const State &s) const {
  if (!s.started) return first_;
  Set n;
  RegexBuilder::each(s.at, [&](int p) { n |= follow_[size_t(p)]; });
  return n;
}

bool Regex::step(State &s, uint32_t cp) const {
  Set r;
  RegexBuilder::each(next_of(s), [&](int p) {
    if (classes_[size_t(p)].contains(cp)) r.add(p);
  });
  if (r.empty()) return false;
  s.at = r;
  s.started = true;
  return true;
}

bool Regex::can_take(const State &s, uint32_t lo, uint32_t hi) const {
  bool any = false;
  RegexBuilder::each(next_of(s), [&](int p) { any = any || classes_[size_t(p)].meets(lo, hi); });
  return any;
}

bool Regex::can_end(const State &s) const {
  if (!s.started) return nullable_;
  return (s.at.w[0] & last_.w[0]) || (s.at.w[1] & last_.w[1]);
}

}  // namespace minfer::sampling
