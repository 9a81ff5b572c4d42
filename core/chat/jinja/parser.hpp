// core/chat/jinja/parser.hpp — tokens to a template's statements.
#pragma once

#include <vector>

#include "chat/jinja/ast.hpp"
#include "chat/jinja/lexer.hpp"

namespace minfer::jinja {

// Throws TemplateError with the line and column of the first token it cannot place.
Body parse(std::vector<Token> tokens);

}  // namespace minfer::jinja
