// core/chat/jinja/lexer.hpp — template source to tokens: text between tags (with the
// whitespace control of -, +, trim_blocks and lstrip_blocks already applied), tag delimiters,
// and the names, literals and operators inside tags. Comments are dropped.
#pragma once

#include <string>
#include <vector>

#include "chat/jinja/ast.hpp"

namespace minfer::jinja {

struct Token {
  enum class Kind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, End };
  Kind kind;
  std::string text;  // Text: the text; Name/Op: the spelling; String: the decoded value
  Pos pos;
  int64_t int_value = 0;
  double float_value = 0;
};

// Throws TemplateError naming the line and column.
std::vector<Token> lex(const std::string &source);

}  // namespace minfer::jinja
