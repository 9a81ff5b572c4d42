// apps/minfer-server/tool_constraints.hpp — constrained decoding of a chat's tool calls: the
// reply written as the template's syntax writes one call, its name one of the tools and its
// arguments that tool's parameters (json_schema.hpp), forced (tool_choice required or a named
// function) or guarded once the reply opens a call (tool_choice auto).
#pragma once

#include <memory>

#include "chat/tool_calls.hpp"
#include "openai.hpp"
#include "sampling/json_constraint.hpp"

namespace minfer::server {

// tools.forced: the reply is one call of them. Hermes and Llama 3 syntaxes; others throw
// BadRequest, as do parameters the schema compiler refuses.
std::shared_ptr<const sampling::TokenConstraint> forced_call(chat::ToolFormat format, const std::shared_ptr<const sampling::ConstraintVocab> &vocab,
                                                          const ToolsRequest &tools);
// tool_choice auto: free text, but a call the reply opens is written whole (Hermes from
// <tool_call>, Llama 3 a reply that opens with '{'); null for other syntaxes or parameters the
// compiler refuses (the calls then go unguarded).
std::shared_ptr<const sampling::TokenConstraint> opened_calls(chat::ToolFormat format, const std::shared_ptr<const sampling::ConstraintVocab> &vocab,
                                                           const ToolsRequest &tools);

}  // namespace minfer::server
