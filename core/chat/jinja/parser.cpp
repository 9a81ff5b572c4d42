// Tokens to statements and expressions, with Jinja's precedence (lowest first): inline if,
// or, and, not, comparisons (== != < <= > >= in, not in), + -, ~, * / // %, **, unary - +,
// then postfix (.attr, [item], [a:b:c], (call)) and filters (| f) and tests (is [not] t).
#include "chat/jinja/parser.hpp"

#include <set>

#include "chat/jinja/template.hpp"

namespace minfer::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_template() {
    Body body = parse_body({});
    if (peek().kind != Token::Kind::End) fail(peek(), "unexpected '" + peek().text + "'");
    return body;
  }

 private:
  using K = Token::Kind;

  const Token &peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token &next() { return t_[std::min(i_++, t_.size() - 1)]; }
  [[noreturn]] void fail(const Token &at, const std::string &what) const { throw TemplateError(what, at.pos.line, at.pos.col); }
  bool is_op(const char *op, size_t ahead = 0) const { return peek(ahead).kind == K::Op && peek(ahead).text == op; }
  bool is_name(const char *n, size_t ahead = 0) const { return peek(ahead).kind == K::Name && peek(ahead).text == n; }
  void expect_op(const char *op) {
    if (!is_op(op)) fail(peek(), std::string("expected '") + op + "', found " + describe(peek()));
    ++i_;
  }
  std::string expect_name(const char *what) {
    if (peek().kind != K::Name) fail(peek(), std::string("expected ") + what + ", found " + describe(peek()));
    return next().text;
  }
  void expect_block_end(const char *tag) {
    if (peek().kind != K::BlockEnd) fail(peek(), std::string("expected the end of the '") + tag + "' tag, found " + describe(peek()));
    ++i_;
  }
  static std::string describe(const Token &t) {
    switch (t.kind) {
      case K::End: return "the end of the template";
      case K::BlockEnd: return "'%}'";
      case K::VarEnd: return "'}}'";
      case K::Text: return "text";
      case K::String: return "a string";
      default: return "'" + t.text + "'";
    }
  }

  static std::string expected(const std::set<std::string> &stops) {
    std::string list;
    for (const auto &s : stops) list += (list.empty() ? "" : " or ") + ("'" + s + "'");
    return list;
  }

  // Statements until one of the block tags in `stops` (left unread: the caller reads it).
  Body parse_body(const std::set<std::string> &stops) {
    Body body;
    while (true) {
      const Token &tok = peek();
      if (tok.kind == K::End) {
        if (!stops.empty()) fail(tok, "the template ended inside a block: expected " + expected(stops));
        return body;
      }
      if (tok.kind == K::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->pos = tok.pos;
        s->text = tok.text;
        ++i_;
        body.push_back(std::move(s));
      } else if (tok.kind == K::VarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->pos = tok.pos;
        s->expr = parse_tuple_or_expression();
        if (peek().kind != K::VarEnd) fail(peek(), "expected '}}', found " + describe(peek()));
        ++i_;
        body.push_back(std::move(s));
      } else if (tok.kind == K::BlockBegin) {
        const Token &kw = peek(1);
        if (kw.kind != K::Name) fail(kw, "expected a tag name after '{%', found " + describe(kw));
        if (stops.count(kw.text)) return body;
        static const std::set<std::string> closers = {"endif", "endfor", "endset", "endmacro", "endcall", "endfilter", "else", "elif"};
        if (closers.count(kw.text) && !stops.empty()) fail(kw, "unexpected '" + kw.text + "': expected " + expected(stops));
        i_ += 2;
        body.push_back(parse_statement(kw));
      } else {
        fail(tok, "unexpected " + describe(tok));
      }
    }
  }

  std::unique_ptr<Stmt> make(Stmt::Kind k, const Token &at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->pos = at.pos;
    return s;
  }

  // The tag keyword has been read.
  std::unique_ptr<Stmt> parse_statement(const Token &kw) {
    Nest nest(*this, kw);
    const std::string &k = kw.text;
    if (k == "if") return parse_if(kw);
    if (k == "for") return parse_for(kw);
    if (k == "set") return parse_set(kw);
    if (k == "macro") return parse_macro(kw);
    if (k == "call") return parse_call_block(kw);
    if (k == "filter") return parse_filter_block(kw);
    if (k == "break" || k == "continue") {
      auto s = make(k == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, kw);
      expect_block_end(k.c_str());
      return s;
    }
    static const std::set<std::string> closers = {"endif", "endfor", "endset", "endmacro", "endcall", "endfilter", "else", "elif"};
    if (closers.count(k)) fail(kw, "'" + k + "' without a block it closes");
    fail(kw, "unknown tag '" + k + "' (supported: if, for, set, macro, call, filter, break, continue)");
  }

  void end_tag(const char *name) {
    if (!is_name(name, 1)) fail(peek(1), std::string("expected '") + name + "'");
    i_ += 2;
    expect_block_end(name);
  }

  std::unique_ptr<Stmt> parse_if(const Token &kw) {
    auto s = make(Stmt::Kind::If, kw);
    s->conditions.push_back(parse_expression());
    expect_block_end("if");
    while (true) {
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      const std::string tag = peek(1).text;
      i_ += 2;
      if (tag == "elif") {
        s->conditions.push_back(parse_expression());
        expect_block_end("elif");
      } else if (tag == "else") {
        expect_block_end("else");
        s->bodies.push_back(parse_body({"endif"}));
        end_tag("endif");
        return s;
      } else {
        expect_block_end("endif");
        return s;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) ++i_;
    names.push_back(expect_name("a loop variable"));
    while (is_op(",")) {
      ++i_;
      names.push_back(expect_name("a loop variable"));
    }
    if (paren) expect_op(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(const Token &kw) {
    auto s = make(Stmt::Kind::For, kw);
    s->targets = parse_targets();
    if (!is_name("in")) fail(peek(), "expected 'in' in the for loop, found " + describe(peek()));
    ++i_;
    s->expr = parse_tuple(/*with_condexpr=*/false);
    if (is_name("if")) {
      ++i_;
      s->filter = parse_expression();
    }
    if (is_name("recursive")) {
      ++i_;
      s->recursive = true;
    }
    expect_block_end("for");
    s->bodies.push_back(parse_body({"else", "endfor"}));
    if (is_name("else", 1)) {
      i_ += 2;
      expect_block_end("else");
      s->bodies.push_back(parse_body({"endfor"}));
    }
    end_tag("endfor");
    return s;
  }

  std::unique_ptr<Stmt> parse_set(const Token &kw) {
    auto s = make(Stmt::Kind::Set, kw);
    s->targets.push_back(expect_name("a variable name"));
    if (is_op(".")) {
      ++i_;
      s->attr = expect_name("an attribute name");
    } else {
      while (is_op(",")) {
        ++i_;
        s->targets.push_back(expect_name("a variable name"));
      }
    }
    if (is_op("=")) {
      ++i_;
      s->expr = parse_tuple_or_expression();
      expect_block_end("set");
      return s;
    }
    // A block set: {% set x %}...{% endset %}, optionally through filters ({% set x | trim %}).
    if (!s->attr.empty() || s->targets.size() != 1) fail(peek(), "a block set assigns one name");
    s->kind = Stmt::Kind::SetBlock;
    if (is_op("|")) s->filter = parse_filters(placeholder(peek()));
    expect_block_end("set");
    s->bodies.push_back(parse_body({"endset"}));
    end_tag("endset");
    return s;
  }

  void parse_params(std::vector<MacroParam> &params) {
    expect_op("(");
    while (!is_op(")")) {
      MacroParam p;
      p.name = expect_name("a parameter name");
      if (is_op("=")) {
        ++i_;
        p.default_value = parse_expression();
      }
      params.push_back(std::move(p));
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  std::unique_ptr<Stmt> parse_macro(const Token &kw) {
    auto s = make(Stmt::Kind::Macro, kw);
    s->name = expect_name("the macro's name");
    parse_params(s->params);
    expect_block_end("macro");
    s->bodies.push_back(parse_body({"endmacro"}));
    end_tag("endmacro");
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block(const Token &kw) {
    auto s = make(Stmt::Kind::CallBlock, kw);
    if (is_op("(")) parse_params(s->params);  // the parameters caller() takes
    s->expr = parse_expression();
    if (s->expr->kind != Expr::Kind::Call) fail(kw, "'call' needs a macro call, e.g. {% call m(x) %}");
    expect_block_end("call");
    s->bodies.push_back(parse_body({"endcall"}));
    end_tag("endcall");
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block(const Token &kw) {
    auto s = make(Stmt::Kind::FilterBlock, kw);
    ExprPtr base = placeholder(kw);
    // The first filter has no leading '|'.
    s->expr = parse_one_filter(std::move(base));
    while (is_op("|")) {
      ++i_;
      s->expr = parse_one_filter(std::move(s->expr));
    }
    expect_block_end("filter");
    s->bodies.push_back(parse_body({"endfilter"}));
    end_tag("endfilter");
    return s;
  }

  // ---- expressions ------------------------------------------------------------------------

  ExprPtr node(Expr::Kind k, const Token &at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->pos = at.pos;
    return e;
  }
  // The value a filter block or block set feeds its filters: a Name no one can spell.
  ExprPtr placeholder(const Token &at) {
    auto e = node(Expr::Kind::Name, at);
    e->name = " body";
    return e;
  }

  ExprPtr parse_tuple_or_expression() { return parse_tuple(true); }

  // a, b, c (a tuple when a comma follows the first expression).
  ExprPtr parse_tuple(bool with_condexpr) {
    const Token &start = peek();
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto t = node(Expr::Kind::Tuple, start);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      ++i_;
      if (peek().kind == K::VarEnd || peek().kind == K::BlockEnd || is_op(")")) break;
      t->args.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return t;
  }

  // Nesting deeper than this (brackets, blocks) is refused: a template from a model file must
  // not exhaust the stack.
  static constexpr int kMaxDepth = 200;
  struct Nest {
    Parser &p;
    Nest(Parser &parser, const Token &at) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail(at, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nest() { --p.depth_; }
  };

  ExprPtr parse_expression() {
    Nest nest(*this, peek());
    ExprPtr e = parse_or();
    if (!is_name("if")) return e;
    auto c = node(Expr::Kind::Cond, next());
    c->args.push_back(parse_or());  // args: the condition, the value if true, the value if false (or null)
    c->args.push_back(std::move(e));
    if (is_name("else")) {
      ++i_;
      c->args.push_back(parse_expression());
    } else {
      c->args.push_back(nullptr);
    }
    return c;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      auto o = node(Expr::Kind::Or, next());
      o->args.push_back(std::move(e));
      o->args.push_back(parse_and());
      e = std::move(o);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      auto a = node(Expr::Kind::And, next());
      a->args.push_back(std::move(e));
      a->args.push_back(parse_not());
      e = std::move(a);
    }
    return e;
  }

  ExprPtr parse_not() {
    Nest nest(*this, peek());
    if (is_name("not")) {
      auto n = node(Expr::Kind::Not, next());
      n->args.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().kind == K::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
                                   peek().text == ">" || peek().text == ">="))
        op = peek().text, ++i_;
      else if (is_name("in")) op = "in", ++i_;
      else if (is_name("not") && is_name("in", 1)) op = "notin", i_ += 2;
      else break;
      if (!cmp) {
        cmp = node(Expr::Kind::Compare, t_[i_ - 1]);
        cmp->args.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  ExprPtr binary(ExprPtr l, const Token &op, ExprPtr r) {
    auto b = node(Expr::Kind::Binary, op);
    b->name = op.text;
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token &op = next();
      e = binary(std::move(e), op, parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token &op = next();
      e = binary(std::move(e), op, parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token &op = next();
      e = binary(std::move(e), op, parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token &op = next();
      e = binary(std::move(e), op, parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this, peek());
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token &op = next();
      e = node(op.text == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, op);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token &tok = peek();
    switch (tok.kind) {
      case K::Name: {
        ++i_;
        if (tok.text == "true" || tok.text == "True" || tok.text == "false" || tok.text == "False") {
          auto e = node(Expr::Kind::Literal, tok);
          e->literal = Value(tok.text == "true" || tok.text == "True");
          return e;
        }
        if (tok.text == "none" || tok.text == "None") {
          auto e = node(Expr::Kind::Literal, tok);
          e->literal = Value::none();
          return e;
        }
        auto e = node(Expr::Kind::Name, tok);
        e->name = tok.text;
        return e;
      }
      case K::String: {
        std::string s;
        while (peek().kind == K::String) s += next().text;  // adjacent literals join, as in Python
        auto e = node(Expr::Kind::Literal, tok);
        e->literal = Value(s);
        return e;
      }
      case K::Int:
      case K::Float: {
        ++i_;
        auto e = node(Expr::Kind::Literal, tok);
        e->literal = tok.kind == K::Int ? Value(tok.int_value) : Value(tok.float_value);
        return e;
      }
      case K::Op:
        if (tok.text == "(") {
          ++i_;
          if (is_op(")")) {  // the empty tuple
            ++i_;
            return node(Expr::Kind::Tuple, tok);
          }
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") {
          ++i_;
          auto e = node(Expr::Kind::List, tok);
          while (!is_op("]")) {
            e->args.push_back(parse_expression());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("]");
          return e;
        }
        if (tok.text == "{") {
          ++i_;
          auto e = node(Expr::Kind::Dict, tok);
          while (!is_op("}")) {
            ExprPtr k = parse_expression();
            expect_op(":");
            e->dict_items.emplace_back(std::move(k), parse_expression());
            if (!is_op(",")) break;
            ++i_;
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail(tok, "expected a value, found " + describe(tok));
  }

  void parse_call_args(Expr &call) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == K::Name && is_op("=", 1)) {
        const std::string key = next().text;
        ++i_;
        call.kwargs.emplace_back(key, parse_expression());
      } else {
        if (!call.kwargs.empty()) fail(peek(), "a positional argument after a keyword argument");
        call.args.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token &dot = next();
        auto a = node(Expr::Kind::Attr, dot);
        a->pos = e->pos;  // errors point at the object: "'u' is undefined" at u
        if (peek().kind == K::Int) {  // x.0 is x[0]
          a->kind = Expr::Kind::Item;
          auto idx = node(Expr::Kind::Literal, peek());
          idx->literal = Value(next().int_value);
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(idx));
        } else {
          a->name = expect_name("an attribute name after '.'");
          a->args.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        const Token &open = next();
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expression();
          if (k < 2 && is_op(":")) {
            ++i_;
            slice = true;
          } else {
            break;
          }
        }
        expect_op("]");
        auto s = node(slice ? Expr::Kind::Slice : Expr::Kind::Item, open);
        s->pos = e->pos;
        s->args.push_back(std::move(e));
        if (slice) {
          for (auto &p : parts) s->args.push_back(std::move(p));
        } else {
          if (!parts[0]) fail(open, "an empty subscript");
          s->args.push_back(std::move(parts[0]));
        }
        e = std::move(s);
      } else if (is_op("(")) {
        auto c = node(Expr::Kind::Call, peek());
        c->pos = e->pos;
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_one_filter(ExprPtr e) {
    const Token &name = peek();
    auto f = node(Expr::Kind::Filter, name);
    f->name = expect_name("a filter name");
    while (is_op(".")) {  // dotted filter names are not used by chat templates; keep the error clear
      fail(peek(), "filter names have no '.'");
    }
    f->args.push_back(std::move(e));
    if (is_op("(")) parse_call_args(*f);
    return f;
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        ++i_;
        e = parse_one_filter(std::move(e));
      } else if (is_name("is")) {
        const Token &is = next();
        auto t = node(Expr::Kind::Test, is);
        if (is_name("not")) {
          ++i_;
          t->negated = true;
        }
        t->name = expect_name("a test name after 'is'");
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(*t);
        } else if (peek().kind == K::String || peek().kind == K::Int || peek().kind == K::Float ||
                   (peek().kind == K::Name && !is_name("and") && !is_name("or") && !is_name("else") && !is_name("if") &&
                    !is_name("in") && !is_name("is") && !is_name("not") && !is_name("recursive"))) {
          t->args.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`, `is sameas x`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::vector<Token> tokens) { return Parser(std::move(tokens)).parse_template(); }

}  // namespace minfer::jinja
