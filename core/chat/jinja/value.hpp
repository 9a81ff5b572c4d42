// core/chat/jinja/value.hpp — the values a Jinja template computes with, with Python's
// semantics where templates see them: str() and repr() spellings, truthiness, ==, ordering.
//
// Lists and dicts are shared (a copy is a reference, as in Python); the sandbox never mutates
// them, except a namespace() object, whose attributes `set ns.x = ...` assigns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace minfer::jinja {

class Value;
struct CallArgs;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict
using Function = std::function<Value(CallArgs &)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = "") {
    Value v;
    v.str_ = std::make_shared<std::string>(std::move(hint));
    return v;
  }
  static Value none() { return make(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), int_(b) {}
  Value(int v) : kind_(Kind::Int), int_(v) {}
  Value(int64_t v) : kind_(Kind::Int), int_(v) {}
  Value(double v) : kind_(Kind::Float), float_(v) {}
  Value(std::string s) : kind_(Kind::String), str_(std::make_shared<std::string>(std::move(s))) {}
  Value(const char *s) : Value(std::string(s)) {}
  Value(List l) : kind_(Kind::List), list_(std::make_shared<List>(std::move(l))) {
    for (const Value &v : *list_) depth_ = std::max(depth_, v.depth_ + 1);
  }
  Value(Dict d) : kind_(Kind::Dict), dict_(std::make_shared<Dict>(std::move(d))) {
    for (const auto &kv : *dict_) depth_ = std::max(depth_, kv.second.depth_ + 1);
  }
  static Value function(std::string name, Function f);
  static Value namespace_object(Dict attrs);  // namespace(): a dict whose attributes can be set

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }  // not bool (Jinja's `number` test)
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_function() const { return kind_ == Kind::Function; }
  bool is_namespace() const { return kind_ == Kind::Dict && namespace_; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_float() const { return kind_ == Kind::Float ? float_ : double(int_); }
  const std::string &as_string() const { return *str_; }
  const List &as_list() const { return *list_; }
  const Dict &as_dict() const { return *dict_; }
  Dict &mutable_dict() const { return *dict_; }  // namespace attributes only
  const Function &as_function() const { return *fn_; }
  const std::string &function_name() const { return *str_; }
  // How deeply lists and dicts nest inside this value (0 for a scalar): printing, comparing
  // and JSON recurse that deep, so the interpreter bounds it.
  int nesting() const { return depth_; }
  const std::string &undefined_hint() const {  // what was looked up, for error messages
    static const std::string empty;
    return str_ ? *str_ : empty;
  }

  // A dict's value for key; nullptr when absent.
  const Value *find(const std::string &key) const;

  bool truthy() const;
  std::string str() const;   // Python's str(): None, True, 1.0, ['a', 1]; Undefined prints ""
  std::string repr() const;  // Python's repr(): strings quoted
  std::string type_name() const;  // "str", "int", "list", "dict", "NoneType", "undefined", ...

 private:
  static Value make(Kind k) {
    Value v;
    v.kind_ = k;
    return v;
  }
  Kind kind_ = Kind::Undefined;
  bool namespace_ = false;
  int depth_ = 0;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;  // String; Undefined's hint; Function's name
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// The arguments of a call: positional, then keyword (name=value), as the template wrote them.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
  // Argument `i`, or the keyword argument `name`, or fallback.
  Value get(size_t i, const char *name, Value fallback = Value()) const {
    for (const auto &[k, v] : kwargs)
      if (k == name) return v;
    return i < args.size() ? args[i] : fallback;
  }
};

// Python's == between two values (1 == 1.0 == True; lists and dicts element by element).
bool equal(const Value &a, const Value &b);
// Python's < for numbers, strings and lists; nothing for other pairs (the caller raises).
bool less(const Value &a, const Value &b, bool &comparable);

// Python's repr() of a float: the shortest text that reads back as the same double.
std::string float_repr(double v);

// json.dumps as transformers' tojson filter calls it: ensure_ascii, indent (negative = none),
// separators (item, key) and sort_keys. Throws std::runtime_error for a value JSON has no
// spelling for (Undefined, a function).
std::string to_json(const Value &v, bool ensure_ascii, int indent, const std::string &item_sep, const std::string &key_sep,
                    bool sort_keys);

}  // namespace minfer::jinja
