#include "chat/jinja/lexer.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "chat/jinja/template.hpp"
#include "tokenizer/unicode.hpp"

namespace minfer::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(const std::string &src) : src_(src) {
    // keep_trailing_newline is off: one newline at the end of the source is not output.
    if (!src_.empty() && src_.back() == '\n') {
      src_.pop_back();
      if (!src_.empty() && src_.back() == '\r') src_.pop_back();
    }
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool strip_next = false;    // the previous tag ended with '-': the text after it loses leading whitespace
    bool line_starting = true;  // the text about to be read starts a line (lstrip_blocks)
    while (pos <= src_.size()) {
      size_t k = pos;
      while (true) {
        k = src_.find('{', k);
        if (k == std::string::npos || k + 1 >= src_.size()) {
          k = src_.size();
          break;
        }
        const char c = src_[k + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++k;
      }
      std::string text = src_.substr(pos, k - pos);
      if (strip_next) {
        const size_t first = std::find_if_not(text.begin(), text.end(), is_space) - text.begin();
        text.erase(0, first);
      }
      if (k < src_.size()) {
        const char kind = src_[k + 1];
        const char marker = k + 2 < src_.size() ? src_[k + 2] : '\0';
        if (marker == '-') {
          while (!text.empty() && is_space(text.back())) text.pop_back();
        } else if (kind != '{' && marker != '+') {
          // lstrip_blocks: spaces and tabs from the line's start up to a block or comment tag.
          const size_t nl = text.rfind('\n');
          const size_t l = nl == std::string::npos ? 0 : nl + 1;
          if ((nl != std::string::npos || (line_starting && !strip_next)) &&
              std::all_of(text.begin() + long(l), text.end(), [](char c) { return c == ' ' || c == '\t'; }))
            text.erase(l);
        }
      }
      if (!text.empty()) out_.push_back({Token::Kind::Text, text, at(pos)});
      if (k >= src_.size()) break;
      pos = tag(k, strip_next, line_starting);
    }
    out_.push_back({Token::Kind::End, "", at(src_.size())});
    return out_;
  }

 private:
  Pos at(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = size_t(it - line_starts_.begin());
    return {int(line), int(offset - line_starts_[line - 1]) + 1};
  }

  [[noreturn]] void fail(size_t offset, const std::string &what) const {
    const Pos p = at(offset);
    throw TemplateError(what, p.line, p.col);
  }

  // After a block or comment end: '-' strips all following whitespace; else trim_blocks takes
  // one newline (not with '+').
  size_t after_block_end(size_t end, char marker, bool &strip_next, bool &line_starting) {
    strip_next = marker == '-';
    line_starting = false;
    if (!strip_next && marker != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;
      line_starting = true;
    }
    return end;
  }

  // Reads the tag at k ("{{", "{%" or "{#"); returns the offset after it.
  size_t tag(size_t k, bool &strip_next, bool &line_starting) {
    const char kind = src_[k + 1];
    size_t p = k + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    if (kind == '#') {
      const size_t e = src_.find("#}", p);
      if (e == std::string::npos) fail(k, "the comment opened here is never closed ('#}' missing)");
      const char marker = e > p && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : '\0';
      return after_block_end(e + 2, marker, strip_next, line_starting);
    }
    const bool var = kind == '{';
    out_.push_back({var ? Token::Kind::VarBegin : Token::Kind::BlockBegin, "", at(k)});
    int depth = 0;  // brackets open inside the tag: a '}' there closes a dict, not the tag
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) fail(k, std::string("the ") + (var ? "'{{'" : "'{%'") + " opened here is never closed");
      if (depth == 0) {
        const char close = var ? '}' : '%';
        size_t q = p;
        char marker = '\0';
        if ((src_[q] == '-' || src_[q] == '+') && q + 2 < src_.size() + 1 && src_.compare(q + 1, 2, std::string(1, close) + "}") == 0)
          marker = src_[q++];
        if (src_.compare(q, 2, std::string(1, close) + "}") == 0) {
          out_.push_back({var ? Token::Kind::VarEnd : Token::Kind::BlockEnd, "", at(p)});
          if (var) {
            strip_next = marker == '-';
            line_starting = false;
            return q + 2;
          }
          return after_block_end(q + 2, marker, strip_next, line_starting);
        }
      }
      p = token(p, depth);
    }
  }

  size_t token(size_t p, int &depth) {
    const char c = src_[p];
    if (std::isalpha(uint8_t(c)) || c == '_') {
      size_t e = p;
      while (e < src_.size() && (std::isalnum(uint8_t(src_[e])) || src_[e] == '_')) ++e;
      out_.push_back({Token::Kind::Name, src_.substr(p, e - p), at(p)});
      return e;
    }
    if (std::isdigit(uint8_t(c))) {
      size_t e = p;
      while (e < src_.size() && (std::isdigit(uint8_t(src_[e])) || src_[e] == '_')) ++e;
      bool is_float = false;
      if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(uint8_t(src_[e + 1]))) {
        is_float = true;
        ++e;
        while (e < src_.size() && std::isdigit(uint8_t(src_[e]))) ++e;
      }
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t f = e + 1;
        if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
        if (f < src_.size() && std::isdigit(uint8_t(src_[f]))) {
          is_float = true;
          e = f;
          while (e < src_.size() && std::isdigit(uint8_t(src_[e]))) ++e;
        }
      }
      std::string digits = src_.substr(p, e - p);
      digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
      Token t{is_float ? Token::Kind::Float : Token::Kind::Int, digits, at(p)};
      if (is_float) t.float_value = std::strtod(digits.c_str(), nullptr);
      else {
        errno = 0;
        t.int_value = std::strtoll(digits.c_str(), nullptr, 10);
        if (errno == ERANGE) fail(p, "the integer " + digits + " does not fit in 64 bits");
      }
      out_.push_back(t);
      return e;
    }
    if (c == '\'' || c == '"') return string(p);
    static const char *ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                                "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
    for (const char *op : ops) {
      const size_t n = std::char_traits<char>::length(op);
      if (src_.compare(p, n, op) == 0) {
        if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
        if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && depth > 0) --depth;
        out_.push_back({Token::Kind::Op, op, at(p)});
        return p + n;
      }
    }
    fail(p, std::string("unexpected character '") + c + "' inside a tag");
  }

  // A quoted string with Python's escapes.
  size_t string(size_t p) {
    const char q = src_[p];
    std::string s;
    size_t i = p + 1;
    for (; i < src_.size() && src_[i] != q; ++i) {
      if (src_[i] != '\\' || i + 1 >= src_.size()) {
        s += src_[i];
        continue;
      }
      const char e = src_[++i];
      switch (e) {
        case 'n': s += '\n'; break;
        case 't': s += '\t'; break;
        case 'r': s += '\r'; break;
        case '0': s += '\0'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'v': s += '\v'; break;
        case 'a': s += '\a'; break;
        case '\\': s += '\\'; break;
        case '\'': s += '\''; break;
        case '"': s += '"'; break;
        case '\n': break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n >= src_.size()) fail(i, "a \\" + std::string(1, e) + " escape needs " + std::to_string(n) + " hex digits");
          const std::string hex = src_.substr(i + 1, n);
          char *end = nullptr;
          const unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
          if (*end) fail(i, "a \\" + std::string(1, e) + " escape needs " + std::to_string(n) + " hex digits");
          s += tokenizer::utf8_encode(uint32_t(cp));
          i += n;
          break;
        }
        default: s += '\\', s += e;  // Python keeps unknown escapes as written
      }
    }
    if (i >= src_.size()) fail(p, "the string opened here is never closed");
    out_.push_back({Token::Kind::String, s, at(p)});
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string &source) { return Lexer(source).run(); }

}  // namespace minfer::jinja
