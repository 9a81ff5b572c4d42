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

// How the loaded template writes calls: its family, and for Mistral whether as
// name[ARGS]{...} (Small 3.2 and later) rather than a JSON list (chat::mistral_name_args).
struct ToolSyntax {
  chat::ToolFormat format = chat::ToolFormat::none;
  bool name_args = false;
};

// tools.forced: the reply is one call of them (a list of them for Mistral's list form and
// Granite). Hermes, Llama 3, Mistral (list or name[ARGS]) and Granite syntaxes; others throw
// BadRequest, as do parameters the schema compiler refuses. vocab: tool_call_vocab's, where the markers are control tokens.
std::shared_ptr<const sampling::TokenConstraint> forced_call(const ToolSyntax &syntax, const std::shared_ptr<const sampling::ConstraintVocab> &vocab,
                                                          const ToolsRequest &tools);
// tool_choice auto: free text, but a call the reply opens is written whole (Hermes from
// <tool_call>, Llama 3 a reply that opens with '{', Mistral and Granite from their list's
// marker, Mistral's name[ARGS] calls from each [TOOL_CALLS]); null for other syntaxes or parameters the compiler refuses (the calls then go
// unguarded).
std::shared_ptr<const sampling::TokenConstraint> opened_calls(const ToolSyntax &syntax, const std::shared_ptr<const sampling::ConstraintVocab> &vocab,
                                                           const ToolsRequest &tools);

}  // namespace minfer::server
