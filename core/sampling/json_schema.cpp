// The automaton (json_schema.hpp): where a reply stands in a compiled schema, character by character.
#include "sampling/json_schema.hpp"

#include <algorithm>
#include <cmath>

namespace minfer::sampling {

namespace {

bool blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool digit(char c) { return c >= '0' && c <= '9'; }
bool hex(char c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

constexpr int kMaxIndent = 20;
constexpr size_t kMaxDepth = 64;     // nesting of containers a reply may reach
constexpr size_t kMaxThreads = 1024;  // alternatives alive at once (more are dropped): a call of any of 1,024 tools
constexpr int kMaxDigits = 16;       // integer and fraction digits of a number, as llama.cpp
constexpr int kMaxExpDigits = 3;

}  // namespace

// Frames by kind (phase values below):
//   value   a value of `node` is to begin: blanks, then its first character picks the kinds
//           that can start with it (one thread each); phase 1: no blanks (the reply's start)
//   object  open, first (a key or '}'), key (after ','), in_key, colon, value, after
//           keys are matched as texts: `lo` an eligible listed key (from `next` up to the first
//           required one) whose first `at` characters were written, `lo_all` any listed key;
//           `free_key` while the key may be one not listed (additionalProperties)
//   array   open, first (a value or ']'), value, after; `next` items written
//   string  open, body; `len` characters, `esc`; with a pattern `re`, and `cp`/`pending` for a
//           code point being read
//   number  open, sign, zero, int, dot, frac, exp_mark, exp_sign, exp; `len` the integer part,
//           `frac` the fraction digits; bounds checked on every prefix (some completion must fit)
//   literal `lo` a value text whose first `at` characters were written

namespace {

using Frame = SchemaState::Frame;
using Thread = SchemaState::Thread;

enum Obj : uint8_t { o_open, o_first, o_key, o_in_key, o_colon, o_value, o_after };
enum Arr : uint8_t { a_open, a_first, a_value, a_after };
enum Str : uint8_t { s_open, s_body };
enum Num : uint8_t { n_open, n_sign, n_zero, n_int, n_dot, n_frac, n_exp_mark, n_exp_sign, n_exp };

enum class Step { fail, ok, done, pass, push, push_refeed };

bool blank_ok(Thread &t, char c) {
  if (t.blanks == 0) {
    t.newline_run = c == '\n';
    t.blanks = 1;
    return c == ' ' || c == '\t' || c == '\n';
  }
  return t.newline_run && (c == ' ' || c == '\t') && ++t.blanks <= kMaxIndent + 1;
}

// One character of a string's body other than its closing quote: escapes, no control bytes.
bool string_char(uint8_t &esc, char c) {
  if (esc == 1) {
    if (c == 'u') return esc = 5, true;
    if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) return false;
    return esc = 0, true;
  }
  if (esc >= 2) {
    if (!hex(c)) return false;
    if (--esc == 1) esc = 0;
    return true;
  }
  if (c == '\\') return esc = 1, true;
  return c != '"' && static_cast<unsigned char>(c) >= 0x20;
}

// Texts [from, to) share their first `at` characters with texts[lo]: the first of them that
// goes on with c, or -1.
// text(k): the k-th text.
template <typename Text>
int32_t advance(Text text, int32_t from, int32_t to, int32_t lo, int32_t at, char c) {
  if (lo < 0) return -1;
  const std::string &p = text(lo);
  for (int32_t k = from; k < to; ++k) {
    const std::string &q = text(k);
    if (q.size() > size_t(at) && q[size_t(at)] == c && q.compare(0, size_t(at), p, 0, size_t(at)) == 0) return k;
  }
  return -1;
}

// Of the texts sharing texts[lo]'s first `at` characters: is one exactly that long, is one longer.
bool text_whole(const std::vector<std::string> &texts, int32_t lo, int32_t at) {
  if (lo < 0) return false;
  for (const std::string &q : texts)
    if (q.size() == size_t(at) && q.compare(0, size_t(at), texts[size_t(lo)], 0, size_t(at)) == 0) return true;
  return false;
}
bool text_goes_on(const std::vector<std::string> &texts, int32_t lo, int32_t at) {
  for (const std::string &q : texts)
    if (q.size() > size_t(at) && q.compare(0, size_t(at), texts[size_t(lo)], 0, size_t(at)) == 0) return true;
  return false;
}

// The eligible keys: from `next` up to and including the first required one.
int32_t window_end(const SchemaNode &n, int32_t next) {
  for (int32_t k = next; k < int32_t(n.props.size()); ++k)
    if (n.props[size_t(k)].required) return k + 1;
  return int32_t(n.props.size());
}
// Whether a key that is not required may come next in an object frame: maxProperties still
// leaves room for it and every required key after it.
bool optional_key_fits(const SchemaNode &n, const Frame &f) {
  if (n.max_n < 0) return true;
  int64_t required = 0;
  for (size_t k = size_t(f.next); k < n.props.size(); ++k) required += n.props[k].required;
  return f.len + 1 + required <= n.max_n;
}
// The listed keys eligible next, [key_window_begin, key_window_end): window_end's, from the
// first required one alone where no optional key fits, and less those that would skip so many
// listed keys that minProperties could no longer be met (where no other keys are taken).
int32_t key_window_begin(const SchemaNode &n, const Frame &f) {
  if (optional_key_fits(n, f)) return f.next;
  const int32_t end = window_end(n, f.next);
  return end > f.next && n.props[size_t(end - 1)].required ? end - 1 : end;
}
int32_t key_window_end(const SchemaNode &n, const Frame &f) {
  const int32_t end = window_end(n, f.next);
  if (n.extra >= 0 || n.min_n == 0) return end;
  return int32_t(std::min<int64_t>(end, int64_t(n.props.size()) + f.len - n.min_n + 1));
}
bool closable(const SchemaNode &n, const Frame &f) {
  for (size_t k = size_t(f.next); k < n.props.size(); ++k)
    if (n.props[k].required) return false;
  return f.len >= n.min_n;
}

int32_t item_node(const SchemaNode &n, int32_t i) { return size_t(i) < n.prefix.size() ? n.prefix[size_t(i)] : n.items; }

// Numbers: is there a value within the node's bounds in the interval between a and b (each end
// in or out)?
bool meets(const SchemaNode &n, long double a, bool a_in, long double b, bool b_in) {
  long double L = a, U = b;
  bool L_in = a_in, U_in = b_in;
  if (n.has_lo) {
    const long double lo = n.lo;
    if (lo > L) L = lo, L_in = !n.lo_excl;
    else if (lo == L) L_in = L_in && !n.lo_excl;
  }
  if (n.has_hi) {
    const long double hi = n.hi;
    if (hi < U) U = hi, U_in = !n.hi_excl;
    else if (hi == U) U_in = U_in && !n.hi_excl;
  }
  if (!(L < U || (L == U && L_in && U_in))) return false;
  if (n.multiple <= 0) return true;
  // A multiple among the values in units of 10^-scale from L to U (ends in or out): integers
  // (scale 0), or decimals of at most `scale` places.
  long double s = 1;
  for (int k = 0; k < n.scale; ++k) s *= 10;
  L *= s, U *= s;
  const long double lo_w = L_in ? std::ceil(L) : std::floor(L) + 1, hi_w = U_in ? std::floor(U) : std::ceil(U) - 1;
  const long double m = static_cast<long double>(n.multiple);
  return std::ceil(lo_w / m) * m <= hi_w;
}

// The value written so far, in units of 10^-scale, is a multiple of the step (its fraction
// digits at most scale: feed_number keeps them so).
bool multiple_of_step(const SchemaNode &n, const Frame &f) {
  unsigned __int128 u = static_cast<unsigned __int128>(f.len), frac = static_cast<unsigned __int128>(f.frac);
  for (int k = 0; k < n.scale; ++k) u *= 10;
  for (int k = f.frac_digits; k < n.scale; ++k) frac *= 10;
  return (u + frac) % static_cast<unsigned __int128>(n.multiple) == 0;
}

using ld = long double;

ld pow10l_(int k) {
  ld p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

// Some completion of the number written so far lies within the bounds.
bool number_feasible(const SchemaNode &n, const Frame &f) {
  if (!n.has_lo && !n.has_hi && n.multiple == 0) return true;
  const bool whole = n.kind == SchemaNode::integer;
  if (n.multiple > 0 && f.frac_digits > n.scale) return false;  // a decimal step's places at most
  // Magnitudes [a, b) (integers: [a, b - 1]) mapped to values by the sign.
  auto fits = [&](long double a, long double b) {
    if (whole) b -= 1;
    return f.neg ? meets(n, -b, whole, -a, true) : meets(n, a, true, b, whole);
  };
  switch (f.phase) {
    case n_sign: return !n.has_lo || n.lo < 0;  // something below zero ("-0" is not offered)
    case n_zero: return whole ? meets(n, 0, true, 0, true) : fits(0, 1);
    case n_int:
      for (int k = 0; k <= kMaxDigits - f.int_digits; ++k) {
        const long double p = pow10l_(k);
        if (fits(ld(f.len) * p, ld(f.len + 1) * p)) return true;
      }
      return false;
    case n_dot:
    case n_frac: {
      const long double scale = pow10l_(f.frac_digits);
      const long double a = ld(f.len) + ld(f.frac) / scale;
      return fits(a, a + 1 / scale);
    }
    default: return true;  // exponents only without bounds
  }
}

bool number_ends(const SchemaNode &n, const Frame &f) {
  if (f.phase != n_zero && f.phase != n_int && f.phase != n_frac && f.phase != n_exp) return false;
  if (n.multiple > 0 && !multiple_of_step(n, f)) return false;
  if (f.phase == n_exp || (!n.has_lo && !n.has_hi)) return true;
  const long double v = (ld(f.len) + ld(f.frac) / pow10l_(f.frac_digits)) * (f.neg ? -1 : 1);
  return meets(n, v, true, v, true);
}

Step feed_number(const SchemaNode &n, Frame &f, char c) {
  const bool whole = n.kind == SchemaNode::integer, bounded = n.has_lo || n.has_hi || n.multiple > 0;
  auto go = [&](uint8_t phase) {
    f.phase = phase;
    return number_feasible(n, f) ? Step::ok : Step::fail;
  };
  const auto end = [&] { return number_ends(n, f) ? Step::pass : Step::fail; };
  switch (f.phase) {
    case n_open:
      if (c == '-') return f.neg = true, go(n_sign);
      [[fallthrough]];
    case n_sign:
      if (c == '0') return f.int_digits = 1, go(n_zero);
      if (!digit(c)) return Step::fail;
      f.len = c - '0', f.int_digits = 1;
      return go(n_int);
    case n_zero:
    case n_int:
      if (digit(c)) {
        if (f.phase == n_zero || f.int_digits >= kMaxDigits) return Step::fail;
        f.len = f.len * 10 + (c - '0'), ++f.int_digits;
        return go(n_int);
      }
      if (c == '.' && !whole) return go(n_dot);
      if ((c == 'e' || c == 'E') && !whole && !bounded) return f.phase = n_exp_mark, Step::ok;
      return end();
    case n_dot:
      if (!digit(c)) return Step::fail;
      f.frac = c - '0', f.frac_digits = 1;
      return go(n_frac);
    case n_frac:
      if (digit(c)) {
        if (f.frac_digits >= kMaxDigits) return Step::fail;
        f.frac = f.frac * 10 + (c - '0'), ++f.frac_digits;
        return go(n_frac);
      }
      if ((c == 'e' || c == 'E') && !bounded) return f.phase = n_exp_mark, Step::ok;
      return end();
    case n_exp_mark:
      if (c == '+' || c == '-') return f.phase = n_exp_sign, Step::ok;
      [[fallthrough]];
    case n_exp_sign:
      if (!digit(c)) return Step::fail;
      f.at = 1;
      return f.phase = n_exp, Step::ok;
    case n_exp:
      if (digit(c)) return ++f.at <= kMaxExpDigits ? Step::ok : Step::fail;
      return end();
  }
  return Step::fail;
}

// A string with a pattern, one byte at a time: code points (UTF-8, escapes) go to the pattern
// whole; a partial one is taken only if some code point it may still become can come next.
Step feed_pattern(const SchemaNode &n, Frame &f, char c) {
  const Regex &re = *n.pattern;
  const auto u = static_cast<unsigned char>(c);
  auto whole = [&](uint32_t cp) { return re.step(f.re, cp) ? Step::ok : Step::fail; };
  auto partial = [&](uint32_t lo, uint32_t hi) { return re.can_take(f.re, lo, hi) ? Step::ok : Step::fail; };
  if (f.pending > 0) {  // a UTF-8 continuation byte
    if ((u & 0xC0) != 0x80) return Step::fail;
    f.cp = f.cp << 6 | (u & 0x3F);
    if (--f.pending == 0) return whole(f.cp);
    const int bits = 6 * f.pending;
    return partial(f.cp << bits, (f.cp << bits) | ((1u << bits) - 1));
  }
  if (f.esc == 1) {
    f.esc = 0;
    switch (c) {
      case '"': case '\\': case '/': return whole(u);
      case 'b': return whole('\b');
      case 'f': return whole('\f');
      case 'n': return whole('\n');
      case 'r': return whole('\r');
      case 't': return whole('\t');
      case 'u': f.esc = 5, f.cp = 0; return partial(0, 0xFFFF);
      default: return Step::fail;
    }
  }
  if (f.esc >= 2) {  // \u's hex digits
    if (!hex(c)) return Step::fail;
    f.cp = f.cp * 16 + uint32_t(digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
    if (--f.esc == 1) return f.esc = 0, whole(f.cp);
    const int bits = 4 * (f.esc - 1);
    return partial(f.cp << bits, (f.cp << bits) | ((1u << bits) - 1));
  }
  if (c == '\\') return f.esc = 1, partial(0, 0xFFFF);
  if (u < 0x20) return Step::fail;  // control characters must be escaped
  if (u < 0x80) return whole(u);
  if (u < 0xC2 || u > 0xF4) return Step::fail;  // no UTF-8 lead byte
  f.pending = u >= 0xF0 ? 3 : u >= 0xE0 ? 2 : 1;
  f.cp = u & (0x3F >> f.pending);
  const int bits = 6 * f.pending;
  return partial(f.cp << bits, std::min<uint32_t>((f.cp << bits) | ((1u << bits) - 1), 0x10FFFF));
}

Step feed_string(const SchemaNode &n, Frame &f, char c) {
  if (f.phase == s_open) {
    if (c != '"') return Step::fail;
    f.phase = s_body;
    return Step::ok;
  }
  if (f.esc == 0 && f.pending == 0 && c == '"') {
    if (f.len < n.min_n || (n.pattern && !n.pattern->can_end(f.re))) return Step::fail;
    return Step::done;
  }
  // A new character: not a UTF-8 continuation byte, not inside an escape (an escape counts once).
  const bool starts = f.esc == 0 && (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  if (starts && n.max_n >= 0 && f.len >= n.max_n) return Step::fail;
  if (n.pattern) {
    if (feed_pattern(n, f, c) == Step::fail) return Step::fail;
  } else if (!string_char(f.esc, c)) {
    return Step::fail;
  }
  if (starts) ++f.len;
  return Step::ok;
}

Step feed_literal(const SchemaNode &n, Frame &f, char c) {
  const auto text = [&n](int32_t k) -> const std::string & { return n.texts[size_t(k)]; };
  const int32_t k = advance(text, 0, int32_t(n.texts.size()), f.lo, f.at, c);
  if (k < 0) return text_whole(n.texts, f.lo, f.at) ? Step::pass : Step::fail;
  f.lo = k, ++f.at;
  return text_whole(n.texts, k, f.at) && !text_goes_on(n.texts, k, f.at) ? Step::done : Step::ok;
}

Step feed_object(const SchemaNode &n, Thread &t, Frame &f, char c) {
  switch (f.phase) {
    case o_open:
      if (c != '{') return Step::fail;
      return f.phase = o_first, Step::ok;
    case o_first:
    case o_key:
      if (blank(c)) return blank_ok(t, c) ? Step::ok : Step::fail;
      if (c == '}' && f.phase == o_first) return closable(n, f) ? Step::done : Step::fail;
      if (c != '"') return Step::fail;
      f.lo = key_window_begin(n, f) < key_window_end(n, f) ? key_window_begin(n, f) : -1;
      f.lo_all = n.props.empty() ? -1 : 0;
      f.at = 1;  // every key text opens with its quote
      f.esc = 0;
      f.free_key = n.extra >= 0 && optional_key_fits(n, f);
      if (f.lo < 0 && !f.free_key) return Step::fail;
      return f.phase = o_in_key, Step::ok;
    case o_in_key: {
      const auto key = [&n](int32_t k) -> const std::string & { return n.props[size_t(k)].key; };
      const int32_t lo = advance(key, key_window_begin(n, f), key_window_end(n, f), f.lo, f.at, c);
      const int32_t all = advance(key, 0, int32_t(n.props.size()), f.lo_all, f.at, c);
      if (lo >= 0 && key(lo).size() == size_t(f.at) + 1) {  // a listed key, whole
        f.child = n.props[size_t(lo)].node;
        f.next = lo + 1, ++f.len;
        return f.phase = o_colon, Step::ok;
      }
      if (f.free_key && f.esc == 0 && c == '"') {  // a key not listed ends: it must differ from every listed one
        if (all >= 0 && key(all).size() == size_t(f.at) + 1) return Step::fail;
        f.child = n.extra, ++f.len;
        return f.phase = o_colon, Step::ok;
      }
      const bool free_ok = f.free_key && string_char(f.esc, c);
      if (lo < 0 && !free_ok) return Step::fail;
      f.lo = lo, f.lo_all = all, f.free_key = free_ok, ++f.at;
      return Step::ok;
    }
    case o_colon:
      if (blank(c)) return blank_ok(t, c) ? Step::ok : Step::fail;
      if (c != ':') return Step::fail;
      return f.phase = o_value, Step::push;
    case o_after:
      if (blank(c)) return blank_ok(t, c) ? Step::ok : Step::fail;
      if (c == '}') return closable(n, f) ? Step::done : Step::fail;
      if (c != ',' || (f.next >= int32_t(n.props.size()) && n.extra < 0) || (n.max_n >= 0 && f.len >= n.max_n)) return Step::fail;
      return f.phase = o_key, Step::ok;
  }
  return Step::fail;
}

Step feed_array(const SchemaNode &n, Thread &t, Frame &f, char c) {
  switch (f.phase) {
    case a_open:
      if (c != '[') return Step::fail;
      return f.phase = a_first, Step::ok;
    case a_first:
    case a_after:
      if (blank(c)) return blank_ok(t, c) ? Step::ok : Step::fail;
      if (c == ']') return f.next >= n.min_n ? Step::done : Step::fail;
      if (f.phase == a_first) {
        if ((f.child = item_node(n, 0)) < 0 || n.max_n == 0) return Step::fail;
        return f.phase = a_value, Step::push_refeed;
      }
      if (c != ',' || (n.max_n >= 0 && f.next >= n.max_n) || (f.child = item_node(n, f.next)) < 0) return Step::fail;
      return f.phase = a_value, Step::push;
  }
  return Step::fail;
}

bool can_start(const SchemaNode &n, char c) {
  switch (n.kind) {
    case SchemaNode::object: return c == '{';
    case SchemaNode::array: return c == '[';
    case SchemaNode::string: return c == '"';
    case SchemaNode::number:
    case SchemaNode::integer: return c == '-' || digit(c);
    case SchemaNode::literal:
      return std::any_of(n.texts.begin(), n.texts.end(), [c](const std::string &t) { return !t.empty() && t[0] == c; });
    case SchemaNode::any_of: return false;
  }
  return false;
}

// The concrete nodes (not alternatives) a value of node `i` can be that begin with c.
void starts(const Schema &s, int32_t i, char c, std::vector<int32_t> &out, int depth = 0) {
  const SchemaNode &n = s.node(i);
  if (n.kind != SchemaNode::any_of) {
    if (can_start(n, c) && std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
    return;
  }
  if (depth > 32) return;  // a reference cycle with no content between
  for (const int32_t a : n.alts) starts(s, a, c, out, depth + 1);
}

Frame begin(const Schema &s, int32_t i) {
  Frame f;
  f.node = i;
  switch (s.node(i).kind) {
    case SchemaNode::object: f.kind = Frame::object; break;
    case SchemaNode::array: f.kind = Frame::array; break;
    case SchemaNode::string: f.kind = Frame::string; break;
    case SchemaNode::number:
    case SchemaNode::integer: f.kind = Frame::number; break;
    default: f.kind = Frame::literal, f.lo = 0; break;
  }
  return f;
}

Frame value_frame(int32_t node, bool blanks_first) {
  Frame f;
  f.kind = Frame::value;
  f.node = node;
  f.phase = blanks_first ? 0 : 1;
  return f;
}

// The array below the top frame, when it keeps its items unique (they are scalars, so the
// item is the top frame itself); null otherwise.
Frame *unique_parent(const Schema &s, Thread &t) {
  if (t.stack.size() < 2) return nullptr;
  Frame &p = t.stack[t.stack.size() - 2];
  return p.kind == Frame::array && s.node(p.node).unique ? &p : nullptr;
}

// The value on top of the stack is whole: its container goes on. False: it repeats an item of
// an array with uniqueItems.
bool child_done(const Schema &s, Thread &t) {
  if (t.stack.empty()) return true;
  Frame &p = t.stack.back();
  if (p.kind == Frame::object) p.phase = o_after;
  if (p.kind == Frame::array) {
    if (s.node(p.node).unique) {
      if (p.seen && std::find(p.seen->begin(), p.seen->end(), p.item) != p.seen->end()) return false;
      auto seen = p.seen ? std::make_shared<std::vector<std::string>>(*p.seen) : std::make_shared<std::vector<std::string>>();
      seen->push_back(std::move(p.item));
      p.seen = std::move(seen);
      p.item.clear();
    }
    ++p.next, p.phase = a_after;
  }
  return true;
}

bool frame_can_end(const Schema &s, const Frame &f) {
  const SchemaNode &n = s.node(f.node);
  if (f.kind == Frame::number) return number_ends(n, f);
  if (f.kind == Frame::literal) return text_whole(n.texts, f.lo, f.at);
  return false;
}

}  // namespace

SchemaState::SchemaState(std::shared_ptr<const Schema> schema) : schema_(std::move(schema)) {
  Thread t;
  t.stack.push_back(value_frame(schema_->root(), /*blanks_first=*/false));
  threads_.push_back(std::move(t));
}

void SchemaState::step(Thread t, char c, std::vector<Thread> &out) const {
  const Schema &s = *schema_;
  if (!blank(c)) t.blanks = 0;  // a run of blanks ends (blanks inside strings are no run)
  for (;;) {
    if (t.stack.empty()) return;  // nothing follows the whole value
    Frame &f = t.stack.back();
    Step r = Step::fail;
    switch (f.kind) {
      case Frame::value: {
        if (blank(c)) {
          if (f.phase == 0 && blank_ok(t, c)) out.push_back(std::move(t));
          return;
        }
        std::vector<int32_t> kinds;
        starts(s, f.node, c, kinds);
        for (size_t k = 0; k < kinds.size(); ++k) {
          Thread u = k + 1 == kinds.size() ? std::move(t) : t;
          u.stack.back() = begin(s, kinds[k]);
          step(std::move(u), c, out);
        }
        return;
      }
      case Frame::object: r = feed_object(s.node(f.node), t, f, c); break;
      case Frame::array: r = feed_array(s.node(f.node), t, f, c); break;
      case Frame::string: r = feed_string(s.node(f.node), f, c); break;
      case Frame::number: r = feed_number(s.node(f.node), f, c); break;
      case Frame::literal: r = feed_literal(s.node(f.node), f, c); break;
    }
    // A scalar item of a uniqueItems array: its characters are kept to compare once it is whole.
    if ((r == Step::ok || r == Step::done) && (f.kind == Frame::string || f.kind == Frame::number || f.kind == Frame::literal))
      if (Frame *p = unique_parent(s, t)) p->item.push_back(c);
    switch (r) {
      case Step::fail: return;
      case Step::ok: out.push_back(std::move(t)); return;
      case Step::push:
      case Step::push_refeed: {
        if (t.stack.size() >= kMaxDepth) return;
        const int32_t child = f.child;
        t.stack.push_back(value_frame(child, /*blanks_first=*/true));
        if (r == Step::push) return out.push_back(std::move(t));
        continue;
      }
      case Step::done:
        t.stack.pop_back();
        if (child_done(s, t)) out.push_back(std::move(t));
        return;
      case Step::pass:
        t.stack.pop_back();
        if (!child_done(s, t)) return;
        continue;
    }
  }
}

namespace {

// A thread's place, for finding threads that came to the same one (equal threads hash equal).
size_t place_hash(const Thread &t) {
  size_t h = t.stack.size() * 0x9E3779B97F4A7C15ull ^ t.blanks;
  for (const Frame &f : t.stack) {
    const uint64_t a = uint64_t(uint32_t(f.node)) << 32 | uint32_t(f.kind) << 24 | uint32_t(f.phase) << 16 | uint32_t(f.esc) << 8 | uint32_t(f.free_key);
    const uint64_t b = uint64_t(uint32_t(f.next)) << 32 ^ uint64_t(uint32_t(f.lo)) << 16 ^ uint64_t(uint32_t(f.at)) ^ uint64_t(f.len) * 31 ^ uint64_t(f.frac);
    h = (h ^ a) * 0x100000001B3ull;
    h = (h ^ b) * 0x100000001B3ull;
  }
  return h;
}

}  // namespace

bool SchemaState::feed(char c) {
  std::vector<Thread> out;
  out.reserve(threads_.size());
  for (const Thread &t : threads_) step(t, c, out);
  if (out.empty()) return false;
  if (out.size() == 1) {
    threads_ = std::move(out);
    return true;
  }
  // Alternatives that came to the same place are one (hashes first: a call of one of hundreds
  // of tools keeps hundreds of threads until the name tells them apart).
  std::vector<std::pair<size_t, size_t>> keyed;  // (hash, index into out)
  for (size_t i = 0; i < out.size(); ++i) keyed.emplace_back(place_hash(out[i]), i);
  std::sort(keyed.begin(), keyed.end());
  std::vector<Thread> unique;
  for (size_t i = 0; i < keyed.size() && unique.size() < kMaxThreads; ++i) {
    bool seen = false;
    for (size_t j = i; j-- > 0 && keyed[j].first == keyed[i].first && !seen;) seen = out[keyed[j].second] == out[keyed[i].second];
    if (!seen) unique.push_back(out[keyed[i].second]);
  }
  threads_ = std::move(unique);
  return true;
}

bool SchemaState::can_end() const {
  return std::any_of(threads_.begin(), threads_.end(), [&](const Thread &t) {
    return t.stack.empty() || (t.stack.size() == 1 && frame_can_end(*schema_, t.stack.back()));
  });
}

bool SchemaState::settled() const {
  return std::all_of(threads_.begin(), threads_.end(), [](const Thread &t) { return t.stack.empty(); });
}

bool SchemaState::in_plain_string() const {
  return std::all_of(threads_.begin(), threads_.end(), [&](const Thread &t) {
    if (t.stack.empty()) return false;
    const Frame &f = t.stack.back();
    const SchemaNode &n = schema_->node(f.node);
    if (f.kind == Frame::string) return f.phase == s_body && f.esc == 0 && !n.pattern && n.max_n < 0;
    return f.kind == Frame::object && f.phase == o_in_key && f.free_key && f.esc == 0 && n.props.empty();
  });
}

}  // namespace minfer::sampling
