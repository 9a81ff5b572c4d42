#include "tool_constraints.hpp"

#include <algorithm>

namespace minfer::server {
namespace {

// A schema's "$ref"s into itself ("#/$defs/X"), for the schema placed at `at` in a larger one.
// (Past 64 levels it stops: the schema compiler refuses that depth anyway.)
void rebase_refs(json &schema, const std::string &at, int depth = 0) {
  if (depth > 64) return;
  if (schema.is_object())
    for (auto &[k, v] : schema.items()) {
      if (k == "$ref" && v.is_string() && v.get<std::string>().starts_with("#")) v = at + v.get<std::string>().substr(1);
      else rebase_refs(v, at, depth + 1);
    }
  else if (schema.is_array())
    for (json &v : schema) rebase_refs(v, at, depth + 1);
}

// The calls as the template's syntax writes one: JSON objects whose name is one of `names` and
// whose arguments follow that tool's parameters (keywords the decoder cannot enforce, such as
// 'multipleOf', are left to the model), as {"anyOf": [...]}; `at` is where that object sits
// in the schema that holds it (its "$ref"s are rebased there).
json call_alternatives(chat::ToolFormat format, const ToolsRequest &tools, const std::vector<std::string> &names, const std::string &at) {
  const char *args = format == chat::ToolFormat::llama3 ? "parameters" : "arguments";
  json calls = json::array();
  for (const json &t : tools.tools) {
    const json &f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    json params = f.contains("parameters") ? f["parameters"] : json{{"type", "object"}};
    rebase_refs(params, at + "/anyOf/" + std::to_string(calls.size()) + "/properties/" + args);
    calls.push_back({{"type", "object"}, {"properties", {{"name", {{"const", name}}}, {args, std::move(params)}}}, {"required", {"name", args}}});
  }
  return json{{"anyOf", std::move(calls)}};
}

std::shared_ptr<const sampling::Schema> compile(const json &schema) {
  try {
    return sampling::Schema::compile(schema, /*strict=*/false);
  } catch (const std::exception &e) {
    throw BadRequest(std::string("'tools': a tool's parameters: ") + e.what());
  }
}

// One call (Hermes, Llama 3).
std::shared_ptr<const sampling::Schema> call_schema(chat::ToolFormat format, const ToolsRequest &tools, const std::vector<std::string> &names) {
  return compile(call_alternatives(format, tools, names, "#"));
}

// A JSON list of calls (Mistral's after [TOOL_CALLS], Granite's after <|tool_call|>): one call
// only where `one` (a forced call, as for the other syntaxes, or parallel calls off).
std::shared_ptr<const sampling::Schema> call_list_schema(chat::ToolFormat format, const ToolsRequest &tools, const std::vector<std::string> &names,
                                                         bool one) {
  json list{{"type", "array"}, {"items", call_alternatives(format, tools, names, "#/items")}, {"minItems", 1}};
  if (one) list["maxItems"] = 1;
  return compile(list);
}

// Mistral's name[ARGS]{...} call (Small 3.2 and later): after [TOOL_CALLS], one of `names`
// and [ARGS], then that tool's arguments as its parameters say.
sampling::ReplyPart name_args_call(const ToolsRequest &tools, const std::vector<std::string> &names) {
  sampling::ReplyPart part{sampling::ReplyPart::choice};
  for (const json &t : tools.tools) {
    const json &f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    part.choices.push_back({name + "[ARGS]", compile(f.contains("parameters") ? f["parameters"] : json{{"type", "object"}})});
  }
  return part;
}

// The marker a list of calls follows, or null where the syntax writes none (Mistral's
// name[ARGS]{...} calls are not a list).
const char *list_marker(const ToolSyntax &syntax) {
  if (syntax.format == chat::ToolFormat::granite) return "<|tool_call|>";
  if (syntax.format == chat::ToolFormat::mistral && !syntax.name_args) return "[TOOL_CALLS]";
  return nullptr;
}

}  // namespace

// A reply that must be a call of one of tools.forced (tool_choice "required" or a named function).
std::shared_ptr<const sampling::TokenConstraint> forced_call(const ToolSyntax &syntax, const std::shared_ptr<const sampling::ConstraintVocab> &vocab,
                                                          const ToolsRequest &tools) {
  using sampling::ReplyPart;
  const chat::ToolFormat format = syntax.format;
  if (const char *marker = list_marker(syntax))
    return sampling::pattern_constraint(vocab, {{ReplyPart::literal, marker}, {ReplyPart::json, {}, call_list_schema(format, tools, tools.forced, true)}});
  if (format == chat::ToolFormat::mistral) return sampling::pattern_constraint(vocab, {{ReplyPart::literal, "[TOOL_CALLS]"}, name_args_call(tools, tools.forced)});
  if (format != chat::ToolFormat::hermes && format != chat::ToolFormat::llama3)
    throw BadRequest(std::string("'tool_choice' that forces a call is supported for <tool_call> (Qwen, Hermes), Llama 3, Mistral and Granite "
                                 "templates; this one writes ") +
                     chat::tool_format_name(format) + ": give \"auto\"");
  const auto call = call_schema(format, tools, tools.forced);
  if (format == chat::ToolFormat::llama3) return sampling::pattern_constraint(vocab, {{ReplyPart::json, {}, call}});
  return sampling::pattern_constraint(vocab, {{ReplyPart::literal, "<tool_call>\n"}, {ReplyPart::json, {}, call}, {ReplyPart::literal, "\n</tool_call>"}});
}

// tool_choice "auto": text is free, but a call the reply opens is written whole, its name one
// of the tools and its arguments as that tool's parameters say: from a <tool_call> (Qwen,
// Hermes), a reply that opens with '{' (Llama 3's JSON call: one a turn, then the end), or a
// list's marker (Mistral, Granite: one list a turn, then the end), or Mistral's [TOOL_CALLS]
// before each name[ARGS]{...} call.
std::shared_ptr<const sampling::TokenConstraint> opened_calls(const ToolSyntax &syntax, const std::shared_ptr<const sampling::ConstraintVocab> &vocab,
                                                           const ToolsRequest &tools) {
  using sampling::ReplyPart;
  const chat::ToolFormat format = syntax.format;
  const char *marker = list_marker(syntax);
  const bool name_args = format == chat::ToolFormat::mistral && syntax.name_args;
  if (format != chat::ToolFormat::hermes && format != chat::ToolFormat::llama3 && !marker && !name_args) return nullptr;
  std::vector<std::string> names;
  for (const json &t : tools.tools) names.push_back(t["function"]["name"].get<std::string>());
  try {
    if (name_args)  // each [TOOL_CALLS] opens one call; parallel calls are several of them
      return sampling::lazy_constraint(vocab, "[TOOL_CALLS]", {name_args_call(tools, names)}, {.once = !tools.parallel});
    if (marker) return sampling::lazy_constraint(vocab, marker, {{ReplyPart::json, {}, call_list_schema(format, tools, names, !tools.parallel)}}, {.once = true});
    const std::shared_ptr<const sampling::Schema> call = call_schema(format, tools, names);
    if (format == chat::ToolFormat::llama3)
      return sampling::lazy_constraint(vocab, "{", {{ReplyPart::json, {}, call}}, {.once = true, .at_start = true, .keep_trigger = true});  // one call a turn
    return sampling::lazy_constraint(vocab, "<tool_call>", {{ReplyPart::literal, "\n"}, {ReplyPart::json, {}, call}, {ReplyPart::literal, "\n</tool_call>"}},
                                     {.once = !tools.parallel});
  } catch (const BadRequest &) {
    return nullptr;  // parameters past what the decoder takes (nested too deep): the calls go unguarded
  }
}

}  // namespace minfer::server
