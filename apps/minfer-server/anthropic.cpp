#include "anthropic.hpp"

#include "common/json.hpp"

namespace minfer::server {
namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string event(const char *name, const json &data) { return std::string("event: ") + name + "\ndata: " + dump(data) + "\n\n"; }

// A block list's text ("text" blocks joined); other kinds refused by name.
std::string text_of(const json &content, const std::string &where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw BadRequest(where + " must be a string or an array of content blocks");
  std::string out;
  for (const json &b : content) {
    const std::string type = b.is_object() ? string_or(b, "type") : "";
    if (type != "text" || !b.contains("text") || !b["text"].is_string())
      throw BadRequest(where + ": a '" + type + "' block is not supported here (text blocks are)");
    if (!out.empty()) out += "\n";
    out += b["text"].get<std::string>();
  }
  return out;
}

// The input of a tool_use block as the arguments text of a call.
json input_object(const std::string &arguments) {
  if (!minfer::json::parse_refusal(arguments).empty()) return json::object();
  json v = json::parse(arguments, nullptr, false);
  return v.is_object() ? v : json::object();
}

}  // namespace

json anthropic_to_openai(const json &body) {
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
  json out = json::object();
  for (const char *k : {"max_tokens", "temperature", "top_p", "top_k", "stream"})
    if (body.contains(k)) out[k] = body[k];
  if (const auto s = body.find("stop_sequences"); s != body.end() && !s->is_null()) out["stop"] = *s;
  if (body.contains("mcp_servers")) throw BadRequest("'mcp_servers' is not supported: give the tools themselves in 'tools'");
  json messages = json::array();
  if (const auto sys = body.find("system"); sys != body.end() && !sys->is_null())
    messages.push_back({{"role", "system"}, {"content", text_of(*sys, "'system'")}});
  const auto ms = body.find("messages");
  if (ms == body.end() || !ms->is_array() || ms->empty()) throw BadRequest("'messages' must be a non-empty array of {role, content}");
  for (size_t i = 0; i < ms->size(); ++i) {
    const json &m = (*ms)[i];
    const std::string where = "'messages[" + std::to_string(i) + "]'";
    const std::string role = m.is_object() ? string_or(m, "role") : "";
    if ((role != "user" && role != "assistant") || !m.contains("content"))
      throw BadRequest(where + " must be {\"role\": \"user\" or \"assistant\", \"content\": ...}");
    const json &content = m["content"];
    if (content.is_string()) {
      messages.push_back({{"role", role}, {"content", content}});
      continue;
    }
    if (!content.is_array()) throw BadRequest(where + ".content must be a string or an array of content blocks");
    std::string text, reasoning;
    bool results = false;  // the message held tool results
    json calls = json::array();
    for (const json &b : content) {
      const std::string type = b.is_object() ? string_or(b, "type") : "";
      if (type == "text" && b.contains("text") && b["text"].is_string()) {
        text += b["text"].get<std::string>();
      } else if (type == "tool_result" && role == "user") {
        // Each result becomes a tool message, before the user's own text (as the API orders them).
        const std::string content_text = b.contains("content") && !b["content"].is_null() ? text_of(b["content"], where + " tool_result content") : "";
        messages.push_back({{"role", "tool"}, {"tool_call_id", string_or(b, "tool_use_id")}, {"content", content_text}});
        results = true;
      } else if (type == "tool_use" && role == "assistant") {
        if (!b.contains("name") || !b["name"].is_string()) throw BadRequest(where + ": a tool_use block needs its name");
        calls.push_back({{"id", string_or(b, "id")}, {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", dump(b.contains("input") ? b["input"] : json::object())}}}});
      } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
        if (b.contains("thinking") && b["thinking"].is_string()) reasoning += b["thinking"].get<std::string>();
      } else {
        throw BadRequest(where + ": a '" + type + "' block is not supported (text, tool_use, tool_result and thinking are)");
      }
    }
    if (role == "user" && text.empty() && results) continue;  // only results: no empty user turn after them
    json msg = {{"role", role}, {"content", text}};
    if (!calls.empty()) msg["tool_calls"] = std::move(calls), msg["content"] = text.empty() ? json(nullptr) : json(text);
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    messages.push_back(std::move(msg));
  }
  out["messages"] = std::move(messages);
  if (const auto ts = body.find("tools"); ts != body.end() && !ts->is_null()) {
    if (!ts->is_array()) throw BadRequest("'tools' must be an array of {name, description, input_schema}");
    json tools = json::array();
    for (const json &t : *ts) {
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || (t.contains("type") && t["type"] != "custom"))
        throw BadRequest("'tools' must be custom tools {name, description, input_schema}; server tools (" +
                         (t.is_object() ? string_or(t, "type", "?") : std::string("?")) + ") are not supported");
      if (!t.contains("input_schema")) throw BadRequest("'tools': " + t["name"].get<std::string>() + " has no input_schema");
      json f = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (t.contains("description")) f["description"] = t["description"];
      tools.push_back({{"type", "function"}, {"function", std::move(f)}});
    }
    out["tools"] = std::move(tools);
  }
  if (const auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    const std::string type = tc->is_object() ? tc->value("type", "") : "";
    if (type == "auto") out["tool_choice"] = "auto";
    else if (type == "any") out["tool_choice"] = "required";
    else if (type == "none") out["tool_choice"] = "none";
    else if (type == "tool" && tc->contains("name")) out["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    else throw BadRequest("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": N}");
    if (const auto d = tc->find("disable_parallel_tool_use"); d != tc->end() && *d == true) out["parallel_tool_calls"] = false;
  }
  if (const auto th = body.find("thinking"); th != body.end() && th->is_object()) {
    const std::string type = th->value("type", "");
    if (type == "enabled" || type == "disabled") out["chat_template_kwargs"] = {{"enable_thinking", type == "enabled"}};
  }
  return out;
}

std::string anthropic_stop_reason(const std::string &finish, const std::string &stop_word, bool called) {
  if (called) return "tool_use";
  if (finish == "length") return "max_tokens";
  if (!stop_word.empty()) return "stop_sequence";
  return "end_turn";
}

json anthropic_message(const AnthropicReply &r) {
  json content = json::array();
  if (!r.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", r.reasoning}, {"signature", ""}});
  if (!r.content.empty()) content.push_back({{"type", "text"}, {"text", r.content}});
  for (size_t i = 0; i < r.calls.size(); ++i)
    content.push_back({{"type", "tool_use"}, {"id", "toolu_" + std::to_string(r.request_id) + "_" + std::to_string(i)}, {"name", r.calls[i].name},
                       {"input", input_object(r.calls[i].arguments)}});
  return {{"id", r.id}, {"type", "message"}, {"role", "assistant"}, {"model", r.model}, {"content", std::move(content)},
          {"stop_reason", r.stop_reason}, {"stop_sequence", r.stop_word.empty() ? json(nullptr) : json(r.stop_word)},
          {"usage", {{"input_tokens", r.input_tokens - r.cached_tokens}, {"output_tokens", r.output_tokens},
                     {"cache_read_input_tokens", r.cached_tokens}, {"cache_creation_input_tokens", 0}}}};
}

json anthropic_error(int status, const std::string &message) {
  const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error" : status == 413 ? "request_too_large"
                     : status == 429 || status == 503 ? "overloaded_error" : status >= 500 ? "api_error" : "invalid_request_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

std::string AnthropicStream::start() {
  return event("message_start", {{"type", "message_start"},
                                 {"message", {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}, {"content", json::array()},
                                              {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                                              {"usage", {{"input_tokens", input_ - cached_}, {"output_tokens", 0},
                                                         {"cache_read_input_tokens", cached_}, {"cache_creation_input_tokens", 0}}}}}});
}

std::string AnthropicStream::close() {
  if (open_.empty()) return "";
  open_.clear();
  return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
}

std::string AnthropicStream::block(const char *type, const json &start) {
  if (open_ == type) return "";
  std::string out = close();
  open_ = type;
  ++index_;
  out += event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", start}});
  return out;
}

// (Each piece is built statement by statement: the operands of + are evaluated in no fixed
// order, and block() moves index_.)
std::string AnthropicStream::thinking(const std::string &piece) {
  if (piece.empty()) return "";
  std::string out = block("thinking", {{"type", "thinking"}, {"thinking", ""}});
  out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "thinking_delta"}, {"thinking", piece}}}});
  return out;
}

std::string AnthropicStream::text(const std::string &piece) {
  if (piece.empty()) return "";
  std::string out = block("text", {{"type", "text"}, {"text", ""}});
  out += event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "text_delta"}, {"text", piece}}}});
  return out;
}

std::string AnthropicStream::tool_uses(const std::vector<chat::ToolCall> &calls, int64_t request_id, size_t first) {
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    out += tool_use_begin(request_id, first + i, calls[i].name);
    out += tool_input(dump(input_object(calls[i].arguments)));
  }
  return out;
}

std::string AnthropicStream::tool_use_begin(int64_t request_id, size_t n, const std::string &name) {
  std::string out = close();
  out += block("tool_use", {{"type", "tool_use"}, {"id", "toolu_" + std::to_string(request_id) + "_" + std::to_string(n)}, {"name", name},
                            {"input", json::object()}});
  return out;
}

std::string AnthropicStream::tool_input(const std::string &piece) {
  if (piece.empty() || open_ != "tool_use") return "";
  return event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "input_json_delta"}, {"partial_json", piece}}}});
}

std::string AnthropicStream::finish(const std::string &stop_reason, const std::string &stop_word, int64_t output_tokens) {
  std::string out = close();
  out += event("message_delta", {{"type", "message_delta"},
                                 {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_word.empty() ? json(nullptr) : json(stop_word)}}},
                                 {"usage", {{"output_tokens", output_tokens}}}});
  out += event("message_stop", {{"type", "message_stop"}});
  return out;
}

std::string AnthropicStream::error(const std::string &message) {
  std::string out = close();
  out += event("error", anthropic_error(500, message));
  return out;
}

}  // namespace minfer::server
