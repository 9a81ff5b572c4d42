// Rendering a parsed template: scopes as Jinja has them (a for loop's body, each iteration,
// and a macro are scopes of their own; if is not), Undefined as jinja2's default Undefined,
// and the limits that stop a template which loops forever or grows without end.
#include <algorithm>
#include <cmath>

#include "chat/jinja/builtins.hpp"
#include "chat/jinja/parser.hpp"
#include "chat/jinja/template.hpp"

namespace minfer::jinja {

TemplateError::TemplateError(const std::string &message, int line, int col, bool raised)
    : std::runtime_error(line > 0 ? "line " + std::to_string(line) + " col " + std::to_string(col) + ": " + message : message),
      message_(message),
      line_(line),
      col_(col),
      raised_(raised) {}

namespace {

struct Frame {
  Dict vars;
  Value *find(const std::string &name) {
    for (auto &[k, v] : vars)
      if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string &name, Value v) {
    if (Value *old = find(name)) *old = std::move(v);
    else vars.emplace_back(name, std::move(v));
  }
};
using Scope = std::vector<std::shared_ptr<Frame>>;  // outermost first

enum class Flow { Normal, Break, Continue };

[[noreturn]] void fail_at(const Pos &p, const std::string &what) { throw TemplateError(what, p.line, p.col); }

class Interpreter {
 public:
  Interpreter(const RenderOptions &opts, std::string &out) : opts_(opts), out_(&out) {}

  void run(const Body &body, Scope scope) {
    scope_ = std::move(scope);
    const Flow f = exec(body);
    (void)f;  // a break outside a loop: jinja2 refuses it at compile time; here it just stops
  }

 private:
  void step(const Pos &p) {
    if (++steps_ > opts_.max_steps)
      fail_at(p, "the template ran more than " + std::to_string(opts_.max_steps) + " steps; it may loop without end");
  }

  void emit(const std::string &s, const Pos &p) {
    out_->append(s);
    if (out_->size() > opts_.max_output)
      fail_at(p, "the template's output grew past " + std::to_string(opts_.max_output) + " bytes");
  }

  Value lookup(const std::string &name) const {
    for (auto it = scope_.rbegin(); it != scope_.rend(); ++it)
      if (Value *v = (*it)->find(name)) return *v;
    return Value::undefined("'" + name + "' is undefined");
  }

  // Renders body into a string of its own (macros, block sets, filter blocks, caller()).
  std::string capture(const Body &body, Flow *flow = nullptr) {
    std::string buf;
    std::string *saved = out_;
    out_ = &buf;
    try {
      const Flow f = exec(body);
      if (flow) *flow = f;
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  Flow exec(const Body &body) {
    for (const auto &s : body) {
      const Flow f = exec(*s);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt &s) {
    step(s.pos);
    switch (s.kind) {
      case Stmt::Kind::Text: emit(s.text, s.pos); return Flow::Normal;
      case Stmt::Kind::Output: emit(eval(*s.expr).str(), s.pos); return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.conditions.size(); ++i)
          if (eval(*s.conditions[i]).truthy()) return exec(s.bodies[i]);
        if (s.bodies.size() > s.conditions.size()) return exec(s.bodies.back());
        return Flow::Normal;
      case Stmt::Kind::For: return exec_for(s);
      case Stmt::Kind::Set: exec_set(s); return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        Value v(capture(s.bodies[0]));
        if (s.filter) v = through(*s.filter, v);
        scope_.back()->set(s.targets[0], v);
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: scope_.back()->set(s.name, make_macro(s.name, s.params, s.bodies[0])); return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        const Value caller = make_macro("caller", s.params, s.bodies[0]);
        emit(eval_call(*s.expr, &caller).str(), s.pos);
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: emit(through(*s.expr, Value(capture(s.bodies[0]))).str(), s.pos); return Flow::Normal;
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  // A filter chain written over the placeholder " body" (block set, filter block), fed v.
  Value through(const Expr &chain, const Value &v) {
    auto frame = std::make_shared<Frame>();
    frame->set(" body", v);
    scope_.push_back(frame);
    Value r = eval(chain);
    scope_.pop_back();
    return r;
  }

  std::vector<Value> items_of(const Value &v, const Pos &p) {
    switch (v.kind()) {
      case Value::Kind::List: return v.as_list();
      case Value::Kind::Dict: {
        if (v.is_namespace()) fail_at(p, "a namespace is not iterable");
        std::vector<Value> keys;
        for (const auto &kv : v.as_dict()) keys.emplace_back(kv.first);
        return keys;
      }
      case Value::Kind::String: {
        std::vector<Value> chars;
        for (auto &c : characters(v.as_string())) chars.emplace_back(std::move(c));
        return chars;
      }
      case Value::Kind::Undefined: return {};  // jinja2's Undefined iterates as empty
      default: fail_at(p, "'" + v.type_name() + "' object is not iterable");
    }
  }

  void bind(Frame &f, const std::vector<std::string> &targets, const Value &v, const Pos &p) {
    if (targets.size() == 1) {
      f.set(targets[0], v);
      return;
    }
    const std::vector<Value> parts = items_of(v, p);
    if (parts.size() != targets.size())
      fail_at(p, "cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) f.set(targets[i], parts[i]);
  }

  Flow exec_for(const Stmt &s) {
    if (s.recursive) fail_at(s.pos, "recursive for loops are not supported");
    std::vector<Value> items = items_of(eval(*s.expr), s.expr->pos);
    if (s.filter) {  // the `if` clause filters before loop.length is known
      std::vector<Value> kept;
      for (const Value &it : items) {
        auto f = std::make_shared<Frame>();
        bind(*f, s.targets, it, s.pos);
        scope_.push_back(f);
        const bool keep = eval(*s.filter).truthy();
        scope_.pop_back();
        if (keep) kept.push_back(it);
      }
      items = std::move(kept);
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step(s.pos);
      auto f = std::make_shared<Frame>();  // each iteration starts from the enclosing scope
      bind(*f, s.targets, items[size_t(i)], s.pos);
      Dict loop = {{"index", Value(i + 1)},
                   {"index0", Value(i)},
                   {"revindex", Value(n - i)},
                   {"revindex0", Value(n - i - 1)},
                   {"first", Value(i == 0)},
                   {"last", Value(i == n - 1)},
                   {"length", Value(n)},
                   {"depth", Value(1)},
                   {"depth0", Value(0)},
                   {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item")},
                   {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item")}};
      loop.emplace_back("cycle", Value::function("loop.cycle", [i](CallArgs &a) {
                          if (a.args.empty()) throw TemplateError("loop.cycle() needs at least one value");
                          return a.args[size_t(i) % a.args.size()];
                        }));
      f->set("loop", Value(std::move(loop)));
      scope_.push_back(f);
      Flow flow;
      try {
        flow = exec(s.bodies[0]);
      } catch (...) {
        scope_.pop_back();
        throw;
      }
      scope_.pop_back();
      if (flow == Flow::Break) break;
    }
    if (n == 0 && s.bodies.size() > 1) return exec(s.bodies[1]);
    return Flow::Normal;
  }

  void exec_set(const Stmt &s) {
    const Value v = eval(*s.expr);
    if (!s.attr.empty()) {
      const Value ns = lookup(s.targets[0]);
      if (!ns.is_namespace())
        fail_at(s.pos, "cannot set the attribute '" + s.attr + "' of '" + s.targets[0] + "': only a namespace() has settable attributes");
      Dict &d = ns.mutable_dict();
      for (auto &[k, old] : d)
        if (k == s.attr) {
          old = v;
          return;
        }
      d.emplace_back(s.attr, v);
      return;
    }
    bind(*scope_.back(), s.targets, v, s.pos);
  }

  // A macro (or a call block's caller) as a function: it renders its body in a scope of its
  // own above the one it was defined in.
  // The macro holds its scope weakly: the frame it is stored in holds the macro, so a strong
  // reference would be a cycle that outlives the render.
  Value make_macro(const std::string &name, const std::vector<MacroParam> &params, const Body &body) {
    std::vector<std::weak_ptr<Frame>> defined_in(scope_.begin(), scope_.end());
    return Value::function(name, [this, name, &params, &body, defined_in](CallArgs &a) -> Value {
      Scope outer;
      for (const auto &w : defined_in) {
        outer.push_back(w.lock());
        if (!outer.back()) throw TemplateError("macro '" + name + "' is called after the block it was defined in ended");
      }
      if (++depth_ > opts_.max_depth) {
        --depth_;
        throw TemplateError("macro calls nested deeper than " + std::to_string(opts_.max_depth));
      }
      auto f = std::make_shared<Frame>();
      Scope saved = std::move(scope_);
      scope_ = std::move(outer);
      scope_.push_back(f);
      std::string text;
      try {
        for (size_t i = 0; i < params.size(); ++i) {
          Value v = i < a.args.size() ? a.args[i] : Value();
          bool given = i < a.args.size();
          for (const auto &[k, kv] : a.kwargs)
            if (k == params[i].name) v = kv, given = true;
          if (!given && params[i].default_value) v = eval(*params[i].default_value);
          else if (!given) v = Value::undefined("'" + params[i].name + "' is undefined (macro '" + name + "' was called without it)");
          f->set(params[i].name, v);
        }
        if (a.args.size() > params.size())
          throw TemplateError("macro '" + name + "' takes " + std::to_string(params.size()) + " arguments, not " +
                              std::to_string(a.args.size()));
        for (const auto &[k, kv] : a.kwargs)
          if (k == "caller") f->set("caller", kv);
        text = capture(body);
      } catch (...) {
        scope_ = std::move(saved);
        --depth_;
        throw;
      }
      scope_ = std::move(saved);
      --depth_;
      return Value(std::move(text));
    });
  }

  // ---- expressions ------------------------------------------------------------------------

  Value eval(const Expr &e) {
    step(e.pos);
    try {
      Value v = eval_inner(e);
      // A string that doubles itself in a loop must stop long before memory does.
      if ((v.is_string() && v.as_string().size() > opts_.max_output) || (v.is_list() && v.as_list().size() > opts_.max_output))
        throw TemplateError("a value grew past " + std::to_string(opts_.max_output) + " bytes (the output limit)");
      if (v.nesting() > opts_.max_depth)
        throw TemplateError("lists or dicts nested deeper than " + std::to_string(opts_.max_depth) + " levels");
      return v;
    } catch (const TemplateError &err) {
      if (err.line() > 0) throw;
      throw TemplateError(err.message(), e.pos.line, e.pos.col, err.raised());
    } catch (const std::exception &err) {  // a builtin's std:: error: give it the template's place
      throw TemplateError(err.what(), e.pos.line, e.pos.col);
    }
  }

  [[noreturn]] void undefined_error(const Value &v) {
    throw TemplateError(v.undefined_hint().empty() ? "a value is undefined" : v.undefined_hint());
  }

  CallArgs eval_args(const Expr &e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.args.push_back(eval(*e.args[i]));
    for (const auto &[k, v] : e.kwargs) a.kwargs.emplace_back(k, eval(*v));
    return a;
  }

  Value eval_call(const Expr &e, const Value *caller) {
    const Value fn = eval(*e.args[0]);
    CallArgs a = eval_args(e, 1);
    if (caller) a.kwargs.emplace_back("caller", *caller);
    if (fn.is_undefined()) undefined_error(fn);
    if (!fn.is_function()) throw TemplateError("'" + fn.type_name() + "' object is not callable");
    return fn.as_function()(a);
  }

  Value attribute(const Value &obj, const std::string &name) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_dict()) {
      if (!obj.is_namespace())
        if (Value m = method(obj, name); !m.is_undefined()) return m;
      if (const Value *v = obj.find(name)) return *v;
      return Value::undefined("'" + std::string(obj.is_namespace() ? "Namespace" : "dict") + " object' has no attribute '" + name + "'");
    }
    if (Value m = method(obj, name); !m.is_undefined()) return m;
    return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }

  static int64_t python_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

  Value item(const Value &obj, const Value &key) {
    if (obj.is_undefined()) undefined_error(obj);
    if (obj.is_dict()) {
      const std::string k = key.is_string() ? key.as_string() : key.str();
      if (const Value *v = obj.find(k)) return *v;
      if (key.is_string())
        if (Value m = method(obj, k); !m.is_undefined()) return m;
      return Value::undefined("'dict object' has no attribute " + key.repr());
    }
    if (obj.is_list() || obj.is_string()) {
      if (!key.is_int() && !key.is_bool()) {
        if (key.is_string()) return attribute(obj, key.as_string());
        throw TemplateError(obj.type_name() + " indices must be integers, not " + key.type_name());
      }
      if (obj.is_list()) {
        const List &l = obj.as_list();
        const int64_t i = python_index(key.as_int(), int64_t(l.size()));
        if (i < 0 || i >= int64_t(l.size())) return Value::undefined("list object has no element " + key.str());
        return l[size_t(i)];
      }
      const auto chars = characters(obj.as_string());
      const int64_t i = python_index(key.as_int(), int64_t(chars.size()));
      if (i < 0 || i >= int64_t(chars.size())) return Value::undefined("str object has no element " + key.str());
      return Value(chars[size_t(i)]);
    }
    if (key.is_string()) return attribute(obj, key.as_string());
    return Value::undefined("'" + obj.type_name() + " object' has no item " + key.repr());
  }

  Value slice(const Value &obj, const Expr &e) {
    if (obj.is_undefined()) undefined_error(obj);
    if (!obj.is_list() && !obj.is_string()) throw TemplateError("'" + obj.type_name() + "' object cannot be sliced");
    std::vector<Value> chars;
    const List *list = nullptr;
    if (obj.is_list()) {
      list = &obj.as_list();
    } else {
      for (auto &c : characters(obj.as_string())) chars.emplace_back(std::move(c));
      list = &chars;
    }
    const int64_t n = int64_t(list->size());
    auto part = [&](const ExprPtr &p, const char *what) -> std::optional<int64_t> {
      if (!p) return std::nullopt;
      const Value v = eval(*p);
      if (v.is_none()) return std::nullopt;
      if (!v.is_int() && !v.is_bool()) throw TemplateError(std::string("slice ") + what + " must be an integer or none, not " + v.type_name());
      return v.as_int();
    };
    const auto start = part(e.args[1], "start"), stop = part(e.args[2], "stop"), stride = part(e.args[3], "step");
    const int64_t step_v = stride.value_or(1);
    if (step_v == 0) throw TemplateError("slice step cannot be zero");
    // Python's slice.indices().
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + n : *v;
      if (step_v > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    const int64_t b = clamp(start, step_v > 0 ? 0 : n - 1), en = clamp(stop, step_v > 0 ? n : -1);
    List out;
    for (int64_t i = b; step_v > 0 ? i < en : i > en; i += step_v) out.push_back((*list)[size_t(i)]);
    if (obj.is_string()) {
      std::string s;
      for (const Value &c : out) s += c.as_string();
      return Value(s);
    }
    return Value(std::move(out));
  }

  static double num(const Value &v) { return v.as_float(); }

  [[noreturn]] static void bad_operands(const std::string &op, const Value &a, const Value &b) {
    throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  }

  Value binary(const std::string &op, const Value &a, const Value &b) {
    if (op == "~") return Value(a.str() + b.str());
    if (a.is_undefined()) undefined_error(a);
    if (b.is_undefined()) undefined_error(b);
    const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
    const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
    if (op == "+") {
      if (an && bn) return ints ? Value(a.as_int() + b.as_int()) : Value(num(a) + num(b));
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list()) {
        List l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return Value(std::move(l));
      }
      bad_operands(op, a, b);
    }
    if (op == "-") {
      if (an && bn) return ints ? Value(a.as_int() - b.as_int()) : Value(num(a) - num(b));
      bad_operands(op, a, b);
    }
    if (op == "*") {
      if (an && bn) return ints ? Value(a.as_int() * b.as_int()) : Value(num(a) * num(b));
      const Value *seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
      const Value *count = seq == &a ? &b : &a;
      if (seq && (count->is_int() || count->is_bool())) {
        const int64_t k = std::max<int64_t>(0, count->as_int());
        const size_t unit = seq->is_string() ? seq->as_string().size() : seq->as_list().size();
        if (unit * size_t(k) > opts_.max_output) throw TemplateError("a repetition of " + std::to_string(k) + " is too large");
        if (seq->is_string()) {
          std::string s;
          for (int64_t i = 0; i < k; ++i) s += seq->as_string();
          return Value(s);
        }
        List l;
        for (int64_t i = 0; i < k; ++i) l.insert(l.end(), seq->as_list().begin(), seq->as_list().end());
        return Value(std::move(l));
      }
      bad_operands(op, a, b);
    }
    if (op == "/") {
      if (!(an && bn)) bad_operands(op, a, b);
      if (num(b) == 0) throw TemplateError("division by zero");
      return Value(num(a) / num(b));
    }
    if (op == "//" || op == "%") {
      if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
      if (!(an && bn)) bad_operands(op, a, b);
      if (num(b) == 0) throw TemplateError(op == "//" ? "integer division by zero" : "modulo by zero");
      if (ints) {  // Python floors toward negative infinity
        const int64_t x = a.as_int(), y = b.as_int();
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;
        return op == "//" ? Value(q) : Value(r);
      }
      const double q = std::floor(num(a) / num(b));
      return op == "//" ? Value(q) : Value(num(a) - q * num(b));
    }
    if (op == "**") {
      if (!(an && bn)) bad_operands(op, a, b);
      if (ints && b.as_int() >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < b.as_int() && i < 64; ++i) r *= a.as_int();
        return Value(r);
      }
      return Value(std::pow(num(a), num(b)));
    }
    throw TemplateError("unknown operator " + op);
  }

  // "%s and %d" % (a, b): the conversions templates use (%s %d %i %r %f %%).
  static std::string percent_format(const std::string &fmt, const Value &args) {
    const List one = {args};
    const List &vals = args.is_list() ? args.as_list() : one;
    std::string out;
    size_t k = 0;
    for (size_t i = 0; i < fmt.size(); ++i) {
      if (fmt[i] != '%' || i + 1 >= fmt.size()) {
        out += fmt[i];
        continue;
      }
      const char c = fmt[++i];
      if (c == '%') {
        out += '%';
        continue;
      }
      if (k >= vals.size()) throw TemplateError("not enough arguments for format string");
      const Value &v = vals[k++];
      if (c == 's') out += v.str();
      else if (c == 'r') out += v.repr();
      else if (c == 'd' || c == 'i') out += std::to_string(v.is_float() ? int64_t(v.as_float()) : v.as_int());
      else if (c == 'f') {
        char b[64];
        std::snprintf(b, sizeof b, "%f", v.as_float());
        out += b;
      } else {
        throw TemplateError(std::string("unsupported format character '") + c + "'");
      }
    }
    return out;
  }

  bool contains(const Value &container, const Value &x) {
    switch (container.kind()) {
      case Value::Kind::String:
        if (!x.is_string()) throw TemplateError("'in <string>' requires a string as left operand, not " + x.type_name());
        return container.as_string().find(x.as_string()) != std::string::npos;
      case Value::Kind::List:
        return std::any_of(container.as_list().begin(), container.as_list().end(), [&](const Value &v) { return equal(v, x); });
      case Value::Kind::Dict: return x.is_string() && container.find(x.as_string()) != nullptr;
      case Value::Kind::Undefined: return false;
      default: throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
    }
  }

  bool compare(const std::string &op, const Value &a, const Value &b) {
    if (op == "==") return equal(a, b);
    if (op == "!=") return !equal(a, b);
    if (op == "in") return contains(b, a);
    if (op == "notin") return !contains(b, a);
    bool ok = true;
    bool r;
    if (op == "<") r = less(a, b, ok);
    else if (op == ">") r = less(b, a, ok);
    else if (op == "<=") r = !less(b, a, ok);
    else r = !less(a, b, ok);
    if (!ok) {
      if (a.is_undefined()) undefined_error(a);
      if (b.is_undefined()) undefined_error(b);
      throw TemplateError("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
    }
    return r;
  }

  Value eval_inner(const Expr &e) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.literal;
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::Attr: return attribute(eval(*e.args[0]), e.name);
      case Expr::Kind::Item: {
        const Value obj = eval(*e.args[0]);
        return item(obj, eval(*e.args[1]));
      }
      case Expr::Kind::Slice: return slice(eval(*e.args[0]), e);
      case Expr::Kind::Call: return eval_call(e, nullptr);
      case Expr::Kind::Filter: {
        const Value v = eval(*e.args[0]);
        return apply_filter(e.name, v, eval_args(e, 1));
      }
      case Expr::Kind::Test: {
        const Value v = eval(*e.args[0]);
        return Value(apply_test(e.name, v, eval_args(e, 1)) != e.negated);
      }
      case Expr::Kind::Neg:
      case Expr::Kind::Pos: {
        const Value v = eval(*e.args[0]);
        if (v.is_undefined()) undefined_error(v);
        if (!v.is_number() && !v.is_bool()) throw TemplateError("bad operand type for unary " + std::string(e.kind == Expr::Kind::Neg ? "-" : "+") + ": '" + v.type_name() + "'");
        if (e.kind == Expr::Kind::Pos) return v.is_bool() ? Value(v.as_int()) : v;
        return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
      }
      case Expr::Kind::Not: return Value(!eval(*e.args[0]).truthy());
      case Expr::Kind::And: {
        Value a = eval(*e.args[0]);
        return a.truthy() ? eval(*e.args[1]) : a;
      }
      case Expr::Kind::Or: {
        Value a = eval(*e.args[0]);
        return a.truthy() ? a : eval(*e.args[1]);
      }
      case Expr::Kind::Binary: {
        const Value a = eval(*e.args[0]);
        return binary(e.name, a, eval(*e.args[1]));
      }
      case Expr::Kind::Compare: {
        Value left = eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::Cond:
        if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if had no else");
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List l;
        for (const auto &a : e.args) l.push_back(eval(*a));
        return Value(std::move(l));
      }
      case Expr::Kind::Dict: {
        Dict d;
        for (const auto &[k, v] : e.dict_items) {
          const Value key = eval(*k);
          const std::string ks = key.is_string() ? key.as_string() : key.str();
          Value val = eval(*v);
          bool replaced = false;
          for (auto &[dk, dv] : d)
            if (dk == ks) dv = val, replaced = true;
          if (!replaced) d.emplace_back(ks, std::move(val));
        }
        return Value(std::move(d));
      }
    }
    return Value();
  }

  const RenderOptions &opts_;
  std::string *out_;
  Scope scope_;
  uint64_t steps_ = 0;
  int depth_ = 0;
};

}  // namespace

Template::Template(const std::string &source) : body_(parse(lex(source))) {}
Template::~Template() = default;

std::string Template::render(const Dict &vars, const RenderOptions &opts) const {
  auto globals = std::make_shared<Frame>();
  std::vector<Value> namespaces;  // emptied at the end: a namespace may hold itself (ns.x = ns)
  add_globals(globals->vars, opts, &namespaces);
  auto top = std::make_shared<Frame>();
  top->vars = vars;
  std::string out;
  struct Clear {
    std::vector<Value> &ns;
    ~Clear() {
      for (Value &v : ns) v.mutable_dict().clear();
    }
  } clear{namespaces};
  Interpreter(opts, out).run(body_, {globals, top});
  return out;
}

}  // namespace minfer::jinja
