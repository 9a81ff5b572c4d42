// core/chat/jinja/ast.hpp — a parsed template: statements and expressions, each with the
// line and column of its source, which every error names.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.hpp"

namespace minfer::jinja {

struct Pos {
  int line = 0, col = 0;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // literal
    Name,     // name
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null parts absent)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..])
    Neg,      // -args[0]
    Pos,      // +args[0]
    Not,      // not args[0]
    Binary,   // args[0] op args[1]: + - * / // % ** ~
    And,
    Or,
    Compare,  // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    Cond,     // args[1] if args[0] else args[2] (args[2] may be null)
    List,
    Tuple,
    Dict,     // kwargs-like pairs in dict_items
  };
  Kind kind;
  Pos pos;
  Value literal;
  std::string name;  // Name, Attr, Filter, Test; the operator of Binary
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
  std::vector<std::string> ops;  // Compare
  bool negated = false;          // Test: `is not`
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, Break, Continue };
  Kind kind;
  Pos pos;
  std::string text;  // Text
  ExprPtr expr;      // Output; For: the iterable; Set: the value; CallBlock: the call; FilterBlock: the filter chain (args[0] empty)
  // If: one condition per branch, bodies[i] its body; bodies.back() the else body when it has
  // one more body than conditions.
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  // For: targets (a, b unpack), its `if` filter, body = bodies[0], else = bodies[1] (optional).
  // Set: targets (one name, ns.attr as "ns" + attr, or several names).
  std::vector<std::string> targets;
  std::string attr;  // Set: `set ns.attr = ...`
  ExprPtr filter;    // For: the `if` condition
  bool recursive = false;
  // Macro / CallBlock: name and parameters; body = bodies[0].
  std::string name;
  std::vector<MacroParam> params;
};

}  // namespace minfer::jinja
