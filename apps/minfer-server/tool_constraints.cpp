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

// One call as the template's syntax writes it: a JSON object whose name is one of `names` and
// whose arguments follow that tool's parameters (keywords the decoder cannot enforce, such as
// 'uniqueItems', are left to the model).
std::shared_ptr<const sampling::Schema> call_schema(chat::ToolFormat format, const ToolsRequest &tools, const std::vector<std::string> &names) {
  const char *args = format == chat::ToolFormat::llama3 ? "parameters" : "arguments";
  json calls = json::array();
  for (const json &t : tools.tools) {
    const json &f = t["function"];
    const std::string name = f["name"].get<std::string>();
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    json params = f.contains("parameters") ? f["parameters"] : json{{"type", "object"}};
    rebase_refs(params, "#/anyOf/" + std::to_string(calls.size()) + "/properties/" + args);
    calls.push_back({{"type", "object"}, {"properties", {{"name", {{"const", name}}}, {args, std::move(params)}}}, {"required", {"name", args}}});
  }
  try {
    return sampling::Schema::compile(json{{"anyOf", std::move(calls)}}, /*strict=*/false);
  } catch (const std::exception &e) {
    throw BadRequest(std::string("'tools': a tool's parameters: ") + e.what());
  }
}

}  // namespace

// A reply that must be a call of one of tools.forced (tool_choice "required" or a named function).
std::shared_ptr<const sampling::TokenConstraint> forced_call(chat::ToolFormat format, const std::shared_ptr<const sampling::ConstraintVocab> &vocab,
                                                          const ToolsRequest &tools) {
  using sampling::ReplyPart;
  if (format != chat::ToolFormat::hermes && format != chat::ToolFormat::llama3)
    throw BadRequest(std::string("'tool_choice' that forces a call is supported for <tool_call> (Qwen, Hermes) and Llama 3 templates; this one writes ") +
                     chat::tool_format_name(format) + ": give \"auto\"");
  const auto call = call_schema(format, tools, tools.forced);
  if (format == chat::ToolFormat::llama3) return sampling::pattern_constraint(vocab, {{ReplyPart::json, {}, call}});
  return sampling::pattern_constraint(vocab, {{ReplyPart::literal, "<tool_call>\n"}, {ReplyPart::json, {}, call}, {ReplyPart::literal, "\n</tool_call>"}});
}

// tool_choice "auto": text is free, but a call the reply opens is written whole, its name one
// of the tools and its arguments as that tool's parameters say: from a <tool_call> (Qwen,
// Hermes), or a reply that opens with '{' (Llama 3's JSON call: one a turn, then the end).
std::shared_ptr<const sampling::TokenConstraint> opened_calls(chat::ToolFormat format, const std::shared_ptr<const sampling::ConstraintVocab> &vocab,
                                                           const ToolsRequest &tools) {
  using sampling::ReplyPart;
  if (format != chat::ToolFormat::hermes && format != chat::ToolFormat::llama3) return nullptr;
  std::vector<std::string> names;
  for (const json &t : tools.tools) names.push_back(t["function"]["name"].get<std::string>());
  std::shared_ptr<const sampling::Schema> call;
  try {
    call = call_schema(format, tools, names);
  } catch (const BadRequest &) {
    return nullptr;  // parameters past what the decoder takes (nested too deep): the calls go unguarded
  }
  if (format == chat::ToolFormat::llama3)
    return sampling::lazy_constraint(vocab, "{", {{ReplyPart::json, {}, call}}, {.once = true, .at_start = true, .keep_trigger = true});  // one call a turn
  return sampling::lazy_constraint(vocab, "<tool_call>", {{ReplyPart::literal, "\n"}, {ReplyPart::json, {}, call}, {ReplyPart::literal, "\n</tool_call>"}},
                                   {.once = !tools.parallel});
}

}  // namespace minfer::server
