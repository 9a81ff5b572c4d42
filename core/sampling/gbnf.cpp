// core/sampling/gbnf.cpp — see gbnf.hpp.
#include "sampling/gbnf.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <deque>
#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "common/error.hpp"

namespace minfer::sampling {

// ---- character sets ----

bool Grammar::CharSet::contains(uint32_t c) const {
  bool in = false;
  for (const auto &[lo, hi] : ranges) in = in || (lo <= c && c <= hi);
  return in != negated;
}

bool Grammar::CharSet::meets(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto &[a, b] : ranges)
      if (a <= hi && lo <= b) return true;
    return false;
  }
  // Negated: some point of [lo, hi] outside every range (sorted by the parser).
  uint64_t at = lo;  // the first point not known to be covered
  for (const auto &[a, b] : ranges) {
    if (a > at) break;
    if (b >= at) at = uint64_t(b) + 1;
    if (at > hi) return false;
  }
  return at <= hi;
}

// ---- parsing ----

class GrammarParser {
 public:
  explicit GrammarParser(const std::string &text) : t_(text) {}

  std::shared_ptr<const Grammar> run() {
    space(true);
    while (i_ < t_.size()) {
      const size_t at = i_;
      const std::string name = rule_name();
      if (name.empty()) fail("a rule name (letters, digits, '-' or '_')", at);
      space(false);
      if (t_.compare(i_, 3, "::=") != 0) fail("'::=' after the rule name '" + name + "'", i_);
      i_ += 3;
      space(true);
      const int32_t id = rule_id(name, at);
      if (defined_[size_t(id)]) fail("a second definition of rule '" + name + "'", at);
      defined_[size_t(id)] = true;
      g_.rules_[size_t(id)] = alternatives(name, false);
      if (i_ < t_.size() && t_[i_] != '\n' && t_[i_] != '\r') fail("the end of the line after rule '" + name + "'", i_);
      space(true);
    }
    for (size_t r = 0; r < defined_.size(); ++r)
      if (!defined_[r]) fail("a definition of rule '" + g_.names_[r] + "', which is used here", used_at_[r]);
    const auto root = ids_.find("root");
    if (root == ids_.end()) throw Error("grammar: no 'root' rule (the reply is root's text)");
    g_.root_ = root->second;
    check_left_recursion();
    return std::make_shared<const Grammar>(std::move(g_));
  }

 private:
  static constexpr int kMaxRepeat = 1000;  // {m,n} bounds
  static constexpr size_t kMaxSymbols = 200000;
  static constexpr int kMaxNesting = 64;  // groups open at once

  std::string where(size_t at) const {  // "line L, column C" of byte at
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < t_.size(); ++k) t_[k] == '\n' ? (++line, col = 1) : ++col;
    return "line " + std::to_string(line) + ", column " + std::to_string(col);
  }
  [[noreturn]] void fail(const std::string &want, size_t at) const { throw Error("grammar: expected " + want + " at " + where(at)); }

  // Blanks and # comments; newlines too where a rule goes on.
  void space(bool newlines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) ++i_;
      else if (c == '#')
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      else break;
    }
  }

  static bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }
  std::string rule_name() {
    const size_t b = i_;
    while (i_ < t_.size() && name_char(t_[i_])) ++i_;
    return t_.substr(b, i_ - b);
  }

  int32_t rule_id(const std::string &name, size_t at) {
    const auto [it, added] = ids_.emplace(name, int32_t(g_.rules_.size()));
    if (added) {
      g_.rules_.emplace_back();
      g_.names_.push_back(name);
      defined_.push_back(false);
      used_at_.push_back(at);
    }
    return it->second;
  }
  int32_t new_rule(const std::string &base, std::vector<Grammar::Alt> alts) {
    const int32_t id = int32_t(g_.rules_.size());
    spend(1);
    g_.rules_.push_back(std::move(alts));
    g_.names_.push_back(base);  // a group's or repetition's rule: named by the rule it is written in
    generated_.resize(g_.rules_.size(), false);
    generated_[size_t(id)] = true;
    defined_.push_back(true);
    used_at_.push_back(0);
    return id;
  }

  std::vector<Grammar::Alt> alternatives(const std::string &rule, bool nested) {
    std::vector<Grammar::Alt> alts{sequence(rule, nested)};
    while (i_ < t_.size() && t_[i_] == '|') {
      ++i_;
      space(true);
      alts.push_back(sequence(rule, nested));
    }
    return alts;
  }

  // One code point of a literal or class: an escape or a UTF-8 character.
  uint32_t code_point() {
    if (i_ >= t_.size()) fail("a character", i_);
    const unsigned char c = static_cast<unsigned char>(t_[i_]);
    if (c == '\\') {
      if (i_ + 1 >= t_.size()) fail("an escape after '\\'", i_);
      const char e = t_[i_ + 1];
      i_ += 2;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\': case '"': case '[': case ']': case '-': case '/': case '^': return uint32_t(e);
        default: fail("one of the escapes \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\xHH \\uHHHH \\UHHHHHHHH", i_ - 2);
      }
    }
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + size_t(len) > t_.size()) fail("UTF-8 text", i_);
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; ++k) {
      const unsigned char b = static_cast<unsigned char>(t_[i_ + size_t(k)]);
      if ((b >> 6) != 2) fail("UTF-8 text", i_);
      cp = cp << 6 | (b & 0x3F);
    }
    i_ += size_t(len);
    return cp;
  }
  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      const char h = i_ < t_.size() ? t_[i_] : '\0';
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) fail(std::to_string(digits) + " hex digits", i_);
      v = v << 4 | uint32_t(d);
    }
    if (v > 0x10FFFF) fail("a code point up to U+10FFFF", i_);
    return v;
  }
  int count() {
    const size_t b = i_;
    int64_t v = 0;
    while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_])) && v <= kMaxRepeat) v = v * 10 + (t_[i_++] - '0');
    if (i_ == b) fail("a count", i_);
    if (v > kMaxRepeat) fail("a count up to " + std::to_string(kMaxRepeat), b);
    return int(v);
  }

  Grammar::Alt sequence(const std::string &rule, bool nested) {
    Grammar::Alt seq;
    for (;;) {
      const size_t at = i_;
      if (i_ >= t_.size()) break;
      const char c = t_[i_];
      Grammar::Alt elem;
      if (c == '"') {
        ++i_;
        while (i_ < t_.size() && t_[i_] != '"') {
          const uint32_t cp = code_point();
          elem.push_back({-1, {{{cp, cp}}, false}});
        }
        if (i_ >= t_.size()) fail("the closing '\"' of the literal", at);
        ++i_;
      } else if (c == '[') {
        ++i_;
        Grammar::CharSet set;
        if (i_ < t_.size() && t_[i_] == '^') set.negated = true, ++i_;
        while (i_ < t_.size() && t_[i_] != ']') {
          const uint32_t lo = code_point();
          uint32_t hi = lo;
          if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
            ++i_;
            hi = code_point();
            if (hi < lo) fail("a range whose end is not below its start", at);
          }
          set.ranges.emplace_back(lo, hi);
        }
        if (i_ >= t_.size()) fail("the closing ']' of the class", at);
        ++i_;
        std::sort(set.ranges.begin(), set.ranges.end());
        elem.push_back({-1, std::move(set)});
      } else if (c == '.') {
        ++i_;
        elem.push_back({-1, {{{0, 0x10FFFF}}, false}});
      } else if (c == '(') {
        // The parser recurses once per open group: 100,000 of them in a request took the
        // connection thread's stack (and the server) with them.
        if (++depth_ > kMaxNesting)
          throw Error("grammar: groups nest deeper than " + std::to_string(kMaxNesting) + " at " + where(at) + "; name the inner groups as rules of their own");
        ++i_;
        space(true);
        std::vector<Grammar::Alt> alts = alternatives(rule, true);
        if (i_ >= t_.size() || t_[i_] != ')') fail("')'", i_);
        ++i_;
        --depth_;
        elem.push_back({new_rule(rule, std::move(alts)), {}});
      } else if (name_char(c)) {
        const std::string name = rule_name();
        elem.push_back({rule_id(name, at), {}});
      } else {
        break;  // '|', ')', the line's end, or what the caller reports
      }
      space(nested);
      spend(elem.size());
      repeat(rule, elem);
      space(nested);
      seq.insert(seq.end(), elem.begin(), elem.end());
    }
    return seq;
  }

  // Symbols written out so far, against kMaxSymbols (a request's grammar must not be able to
  // take the server's memory: "300 characters"{1000} is 300,000).
  void spend(size_t n) {
    spent_ += n;
    if (spent_ > kMaxSymbols)
      throw Error("grammar: too large once its repetitions are written out (more than " + std::to_string(kMaxSymbols) + " symbols)");
  }

  // A repetition after an element turns it into a reference to a rule that repeats it.
  void repeat(const std::string &rule, Grammar::Alt &elem) {
    if (i_ >= t_.size()) return;
    const char c = t_[i_];
    int lo = 0, hi = -1;  // hi -1: no limit
    if (c == '*') lo = 0, ++i_;
    else if (c == '+') lo = 1, ++i_;
    else if (c == '?') lo = 0, hi = 1, ++i_;
    else if (c == '{') {
      const size_t at = i_++;
      space(true);
      lo = count();
      space(true);
      hi = lo;
      if (i_ < t_.size() && t_[i_] == ',') {
        ++i_;
        space(true);
        hi = i_ < t_.size() && t_[i_] == '}' ? -1 : count();
        space(true);
      }
      if (i_ >= t_.size() || t_[i_] != '}') fail("'}'", i_);
      ++i_;
      if (hi >= 0 && hi < lo) fail("{m,n} with n at least m", at);
    } else {
      return;
    }
    spend(elem.size() * size_t(std::max(lo, hi) + 1));  // before writing them out
    Grammar::Alt out;
    for (int k = 0; k < lo; ++k) out.insert(out.end(), elem.begin(), elem.end());
    if (hi < 0) {  // R ::= elem R | (nothing)
      const int32_t r = new_rule(rule, {});
      Grammar::Alt loop = elem;
      loop.push_back({r, {}});
      g_.rules_[size_t(r)] = {loop, {}};
      out.push_back({r, {}});
    } else if (hi > lo) {  // R_k ::= elem R_(k-1) | (nothing), R_1 ::= elem | (nothing)
      int32_t inner = -1;
      for (int k = 1; k <= hi - lo; ++k) {
        Grammar::Alt one = elem;
        if (inner >= 0) one.push_back({inner, {}});
        inner = new_rule(rule, {one, {}});
      }
      out.push_back({inner, {}});
    }
    elem = std::move(out);
  }

  // A rule that can begin with itself (through rules that may match nothing first) would make
  // the parse stacks grow without end.
  void check_left_recursion() const {
    const size_t n = g_.rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Grammar::Alt &a : g_.rules_[r])
          if (std::all_of(a.begin(), a.end(), [&](const Grammar::Sym &s) { return s.rule >= 0 && nullable[size_t(s.rule)]; })) {
            nullable[r] = changed = true;
            break;
          }
      }
    }
    std::vector<std::vector<int32_t>> first(n);  // the rules each may begin with
    for (size_t r = 0; r < n; ++r)
      for (const Grammar::Alt &a : g_.rules_[r])
        for (const Grammar::Sym &s : a) {
          if (s.rule < 0) break;
          first[r].push_back(s.rule);
          if (!nullable[size_t(s.rule)]) break;
        }
    // Depth-first over `first` with a stack of its own (a chain of 50,000 rules, each beginning
    // with the next, recursed as deep and took a connection thread's stack).
    std::vector<int> mark(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<size_t, size_t>> path;  // (rule, the next of its first rules to visit)
    for (size_t r0 = 0; r0 < n; ++r0) {
      if (mark[r0] != 0) continue;
      mark[r0] = 1;
      path.emplace_back(r0, 0);
      while (!path.empty()) {
        auto &[r, next] = path.back();
        if (next == first[r].size()) {
          mark[r] = 2;
          path.pop_back();
          continue;
        }
        const size_t s = size_t(first[r][next++]);
        if (mark[s] == 1)
          throw Error(generated_.size() > s && generated_[s]
                          ? "grammar: a group or repetition in rule '" + g_.names_[s] +
                                "' can begin with itself (a * or + over something that may match nothing, such as (x*)*); repeat something that always takes a character"
                          : "grammar: rule '" + g_.names_[s] + "' is left-recursive (it can begin with itself); write the repetition with * or + instead");
        if (mark[s] == 0) {
          mark[s] = 1;
          path.emplace_back(s, 0);
        }
      }
    }
  }

  const std::string &t_;
  size_t i_ = 0;
  Grammar g_;
  std::map<std::string, int32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> used_at_;
  std::vector<bool> generated_;  // rules made for groups and repetitions
  size_t spent_ = 0;
  int depth_ = 0;  // groups open
};

std::shared_ptr<const Grammar> Grammar::compile(const std::string &text) { return GrammarParser(text).run(); }

// ---- the parse state ----

namespace {

using Stack = GrammarState::Stack;
constexpr size_t kMaxStacks = 8192;  // ambiguity beyond this many parses at once is cut (the first kept)
constexpr size_t kMaxDepth = 4096;   // rule frames of a parse (a JSON grammar takes 2-3 per nesting level)

// UTF-8: the sequence length a lead byte starts (0: not a lead byte).
int utf8_len(unsigned char c) { return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0; }

// The code points an unfinished sequence can still become, or nullopt if it is no prefix of one.
std::optional<std::pair<uint32_t, uint32_t>> partial_range(const std::string &p) {
  const int len = utf8_len(static_cast<unsigned char>(p[0]));
  if (len < 2 || int(p.size()) >= len) return std::nullopt;
  uint32_t lo = static_cast<unsigned char>(p[0]) & (0x7F >> len), hi = lo;
  for (int k = 1; k < len; ++k) {
    if (size_t(k) < p.size()) {
      const unsigned char b = static_cast<unsigned char>(p[size_t(k)]);
      if ((b >> 6) != 2) return std::nullopt;
      lo = lo << 6 | (b & 0x3F), hi = hi << 6 | (b & 0x3F);
    } else {
      lo = lo << 6, hi = hi << 6 | 0x3F;
    }
  }
  return std::make_pair(lo, std::min<uint32_t>(hi, 0x10FFFF));
}

const Grammar::Sym *top_sym(const Grammar &g, const Stack &s) {
  const GrammarState::Pos &p = s.back();
  return &g.rules()[size_t(p.rule)][size_t(p.alt)][size_t(p.idx)];
}

void normalize(std::vector<Stack> &v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  if (v.size() > kMaxStacks) v.resize(kMaxStacks);
}

}  // namespace

// Until its top is a character set (or it is empty: root complete). A stack's frames are
// where to go on: a finished alternative gives way to the frame below; a reference is replaced
// by the position after it (none where it ends its alternative: a tail call, so a repetition,
// R ::= x R | (nothing), keeps the stack as deep as it was) with the referenced rule's
// alternatives on top.
// The other alternatives wait in a list of their own, not on the call stack (a chain of
// 50,000 rules r ::= "x" | r' recursed as deep). Bounds, against what a request's grammar can
// make a step do: a stack deeper than kMaxDepth frames is dropped (a chain of 50,000 rules
// each beginning with the next built one 50,000 deep, and copied it at every step), and past
// a few times kMaxStacks stacks the rest are not expanded (normalize keeps kMaxStacks anyway).
void GrammarState::expand(const Grammar &g, Stack s, std::vector<Stack> &out, Expansion &x) {
  constexpr size_t kRecordAfter = 256;  // steps of an expansion before it records stacks
  std::vector<Stack> &todo = x.todo;    // empty between calls; kept for its capacity
  for (;;) {
    // Follow s until it ends (a character set on top, root complete, dropped or met before),
    // then take the next waiting alternative.
    bool ended = false;
    ++x.steps;
    if (s.empty()) {
      out.push_back(std::move(s));
      ended = true;
    } else if (s.size() > kMaxDepth) {
      ended = true;
    } else {
      const Pos top = s.back();
      const Grammar::Alt &alt = g.rules()[size_t(top.rule)][size_t(top.alt)];
      if (size_t(top.idx) == alt.size()) {
        s.pop_back();
        // Ways through alternatives that matched nothing meet here: each goes on once.
        ended = x.steps > kRecordAfter && !x.seen.insert(s).second;
      } else if (const Grammar::Sym &sym = alt[size_t(top.idx)]; sym.rule < 0) {
        out.push_back(std::move(s));
        ended = true;
      } else {
        s.pop_back();
        if (size_t(top.idx) + 1 < alt.size()) s.push_back({top.rule, top.alt, top.idx + 1});
        const auto &alts = g.rules()[size_t(sym.rule)];
        for (size_t a = 1; a < alts.size(); ++a) {
          todo.push_back(s);
          todo.back().push_back({sym.rule, int32_t(a), 0});
        }
        if (alts.empty()) ended = true;
        else s.push_back({sym.rule, 0, 0});
      }
    }
    if (!ended) continue;
    if (todo.empty()) return;
    if (out.size() >= 4 * kMaxStacks) return todo.clear();
    s = std::move(todo.back());
    todo.pop_back();
  }
}

GrammarState::GrammarState(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  const auto &alts = g_->rules()[size_t(g_->root())];
  Expansion x;
  for (size_t a = 0; a < alts.size(); ++a) expand(*g_, Stack{{g_->root(), int32_t(a), 0}}, stacks_, x);
  normalize(stacks_);
}

std::vector<GrammarState::Stack> GrammarState::advance(const Grammar &g, const std::vector<Stack> &stacks, uint32_t cp) {
  std::vector<Stack> next;
  Expansion x;
  for (const Stack &s : stacks) {
    if (s.empty() || !top_sym(g, s)->chars.contains(cp)) continue;
    Stack t = s;
    ++t.back().idx;
    expand(g, std::move(t), next, x);
  }
  normalize(next);
  return next;
}

bool GrammarState::partial_ok(const Grammar &g, const std::vector<Stack> &stacks, const std::string &p) {
  const auto r = partial_range(p);
  if (!r) return false;
  for (const Stack &s : stacks)
    if (!s.empty() && top_sym(g, s)->chars.meets(r->first, r->second)) return true;
  return false;
}

bool GrammarState::feed(const std::string &bytes) {
  std::vector<Stack> keep = stacks_;
  const std::string kept_pending = pending_;
  const auto undo = [&] {
    stacks_ = std::move(keep);
    pending_ = kept_pending;
    return false;
  };
  std::string s = pending_ + bytes;
  pending_.clear();
  for (size_t i = 0; i < s.size();) {
    const int len = utf8_len(static_cast<unsigned char>(s[i]));
    if (len == 0) return undo();
    if (i + size_t(len) > s.size()) {
      pending_ = s.substr(i);
      if (!partial_ok(*g_, stacks_, pending_)) return undo();
      break;
    }
    uint32_t cp = static_cast<unsigned char>(s[i]) & (len == 1 ? 0x7F : 0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((b >> 6) != 2) return undo();
      cp = cp << 6 | (b & 0x3F);
    }
    std::vector<Stack> next = advance(*g_, stacks_, cp);
    if (next.empty()) return undo();
    stacks_ = std::move(next);
    i += size_t(len);
  }
  return true;
}

bool GrammarState::can_end() const {
  return pending_.empty() && std::any_of(stacks_.begin(), stacks_.end(), [](const Stack &s) { return s.empty(); });
}

// ---- the token constraint ----

namespace {

// The vocabulary's texts in byte order with each one's common prefix with the one before: a
// pass over it shares the work of common prefixes, and a dead prefix skips every token under it.
struct SortedVocab {
  std::vector<int32_t> order;
  std::vector<uint32_t> lcp;
};

std::shared_ptr<const SortedVocab> sorted_vocab(const std::shared_ptr<const ConstraintVocab> &v) {
  static std::mutex mu;
  static std::map<const ConstraintVocab *, std::pair<std::weak_ptr<const ConstraintVocab>, std::shared_ptr<const SortedVocab>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto &slot = cache[v.get()];
  if (slot.second && !slot.first.expired()) return slot.second;
  auto sv = std::make_shared<SortedVocab>();
  std::vector<uint8_t> end(v->texts.size(), 0);
  for (const int32_t e : v->eog)
    if (e >= 0 && size_t(e) < end.size()) end[size_t(e)] = 1;
  for (size_t t = 0; t < v->texts.size(); ++t)
    if (!v->texts[t].empty() && !end[t]) sv->order.push_back(int32_t(t));
  std::sort(sv->order.begin(), sv->order.end(), [&](int32_t a, int32_t b) { return v->texts[size_t(a)] < v->texts[size_t(b)]; });
  sv->lcp.resize(sv->order.size(), 0);
  for (size_t k = 1; k < sv->order.size(); ++k) {
    const std::string &a = v->texts[size_t(sv->order[k - 1])], &b = v->texts[size_t(sv->order[k])];
    size_t l = 0;
    while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
    sv->lcp[k] = uint32_t(l);
  }
  slot = {v, sv};
  return sv;
}

bool is_end(const ConstraintVocab &v, int32_t t) { return std::find(v.eog.begin(), v.eog.end(), t) != v.eog.end(); }

}  // namespace

class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const ConstraintVocab> vocab, std::shared_ptr<const Grammar> g)
      : vocab_(std::move(vocab)), sorted_(sorted_vocab(vocab_)), g_(g), state_(std::move(g)) {}

  bool allows(int32_t token) const override {
    if (token < 0 || size_t(token) >= vocab_->texts.size()) return false;
    if (is_end(*vocab_, token)) return state_.can_end();
    const std::string &x = vocab_->texts[size_t(token)];
    if (x.empty()) return false;  // a control token writes nothing the grammar could take
    GrammarState s = state_;
    return s.feed(x);
  }

  // The sorted vocabulary walked once, each token from its common prefix with the one before,
  // over interned stack sets with memoized steps; a set's mask is kept, since a grammar comes
  // back to the same places (inside a string, between items) again and again.
  void allowed_all(int64_t n, std::vector<uint8_t> &allowed) const override {
    const int32_t start = intern(state_.stacks_);
    const bool keepable = state_.pending_.empty() && n == int64_t(vocab_->texts.size());
    if (keepable)
      if (const auto it = masks_.find(start); it != masks_.end()) return void(allowed = it->second);
    allowed.assign(size_t(n), 0);
    const bool can_end = state_.can_end();
    for (const int32_t e : vocab_->eog)
      if (e >= 0 && e < n) allowed[size_t(e)] = can_end;
    std::vector<Frame> frames{{start, {}, uint8_t(state_.pending_.size())}};  // frames[d]: after the token's first d bytes
    std::copy(state_.pending_.begin(), state_.pending_.end(), frames[0].pending);
    size_t dead_at = SIZE_MAX;  // the byte of the previous token that no parse took
    for (size_t k = 0; k < sorted_->order.size(); ++k) {
      const int32_t t = sorted_->order[k];
      const std::string &x = vocab_->texts[size_t(t)];
      const size_t l = sorted_->lcp[k];
      if (dead_at < l) continue;  // it begins with the dead prefix
      dead_at = SIZE_MAX;
      if (frames.size() > l + 1) frames.resize(l + 1);
      while (frames.size() <= x.size()) {
        Frame f = frames.back();
        if (!step(f, x[frames.size() - 1])) {
          dead_at = frames.size() - 1;
          break;
        }
        frames.push_back(f);
      }
      if (dead_at == SIZE_MAX && t < n) allowed[size_t(t)] = 1;
    }
    if (keepable) {
      if (masks_.size() >= kMaxMasks) masks_.clear();
      masks_[start] = allowed;
    }
  }

  void accept(int32_t token) override {
    if (token < 0 || size_t(token) >= vocab_->texts.size() || is_end(*vocab_, token)) return;
    state_.feed(vocab_->texts[size_t(token)]);
  }
  int32_t dead_end_token() const override { return vocab_->eog.empty() ? -1 : vocab_->eog[0]; }
  std::unique_ptr<TokenConstraint> fresh() const override { return std::make_unique<GrammarConstraint>(vocab_, g_); }

 private:
  static constexpr size_t kMaxMasks = 32;  // ~150 KB each for a 152k vocabulary

  int32_t intern(const std::vector<GrammarState::Stack> &set) const {
    const auto [it, added] = ids_.emplace(set, int32_t(sets_.size()));
    if (added) {
      sets_.push_back(set);
      ascii_.emplace_back();
      ascii_.back().fill(kUnknown);
    }
    return it->second;
  }
  // Where the walk over a token's bytes is: a stack set and the bytes of an unfinished code point.
  struct Frame {
    int32_t set;
    char pending[4];
    uint8_t n;
  };
  // One byte more of a token: a finished code point moves the set (-1: no parse takes it), an
  // unfinished one must begin a code point some stack could take.
  bool step(Frame &f, char byte) const {
    if (f.n == 0 && static_cast<unsigned char>(byte) < 0x80) return ascii_step(f, uint32_t(byte));
    if (f.n >= 4) return false;
    f.pending[f.n++] = byte;
    const int len = utf8_len(static_cast<unsigned char>(f.pending[0]));
    if (len == 0) return false;
    if (f.n < len) {  // memoized by (set, the bytes so far)
      uint64_t key = uint64_t(uint32_t(f.set)) << 26 | uint64_t(f.n) << 24;
      for (int k = 0; k < f.n; ++k) key |= uint64_t(static_cast<unsigned char>(f.pending[k])) << (8 * k);
      auto it = partial_.find(key);
      if (it == partial_.end()) it = partial_.emplace(key, GrammarState::partial_ok(*g_, sets_[size_t(f.set)], std::string(f.pending, f.n))).first;
      return it->second;
    }
    uint32_t cp = static_cast<unsigned char>(f.pending[0]) & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const unsigned char b = static_cast<unsigned char>(f.pending[k]);
      if ((b >> 6) != 2) return false;
      cp = cp << 6 | (b & 0x3F);
    }
    f.n = 0;
    return cp < 128 ? ascii_step(f, cp) : other_step(f, cp);
  }
  bool ascii_step(Frame &f, uint32_t cp) const {  // most of a vocabulary's bytes: a table per set
    int32_t &to = ascii_[size_t(f.set)][cp];
    if (to == kUnknown) to = moved(f.set, cp);  // (intern grows ascii_, a deque: this table stays put)
    f.set = to;
    return f.set >= 0;
  }
  // Where cp leads from a set: it depends only on which of the set's stacks take cp, so code
  // points are grouped by that (a string's thousands of characters are one group).
  int32_t moved(int32_t set, uint32_t cp) const {
    const std::vector<GrammarState::Stack> &stacks = sets_[size_t(set)];
    if (stacks.size() > 64) {
      const std::vector<GrammarState::Stack> to = GrammarState::advance(*g_, stacks, cp);
      return to.empty() ? -1 : intern(to);
    }
    uint64_t taken = 0;
    for (size_t i = 0; i < stacks.size(); ++i)
      if (!stacks[i].empty() && top_sym(*g_, stacks[i])->chars.contains(cp)) taken |= uint64_t(1) << i;
    if (taken == 0) return -1;
    const auto [it, added] = by_taken_.emplace(std::make_pair(set, taken), -1);
    if (added) {
      const std::vector<GrammarState::Stack> to = GrammarState::advance(*g_, stacks, cp);
      it->second = to.empty() ? -1 : intern(to);
    }
    return it->second;
  }
  bool other_step(Frame &f, uint32_t cp) const {
    const uint64_t key = uint64_t(uint32_t(f.set)) << 21 | cp;
    auto it = next_.find(key);
    if (it == next_.end()) it = next_.emplace(key, moved(f.set, cp)).first;
    f.set = it->second;
    return f.set >= 0;
  }

  std::shared_ptr<const ConstraintVocab> vocab_;
  std::shared_ptr<const SortedVocab> sorted_;
  std::shared_ptr<const Grammar> g_;
  GrammarState state_;
  // The mask's memo, this request's own: stack sets by id, steps between them, masks by set.
  mutable std::map<std::vector<GrammarState::Stack>, int32_t> ids_;
  mutable std::vector<std::vector<GrammarState::Stack>> sets_;
  static constexpr int32_t kUnknown = -2;
  mutable std::deque<std::array<int32_t, 128>> ascii_;  // per set: where each ASCII code point leads
  mutable std::unordered_map<uint64_t, int32_t> next_;  // the others, by (set, code point)
  mutable std::unordered_map<uint64_t, bool> partial_;  // unfinished code points, by (set, bytes)
  mutable std::map<std::pair<int32_t, uint64_t>, int32_t> by_taken_;  // by (set, which of its stacks take the code point)
  mutable std::unordered_map<int32_t, std::vector<uint8_t>> masks_;
};

std::shared_ptr<const TokenConstraint> gbnf_constraint(std::shared_ptr<const ConstraintVocab> vocab, std::shared_ptr<const Grammar> grammar) {
  return std::make_shared<GrammarConstraint>(std::move(vocab), std::move(grammar));
}

}  // namespace minfer::sampling
