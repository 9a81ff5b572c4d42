#include "responses.hpp"

#include <algorithm>

namespace minfer::server {
namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A content list's text (input_text / output_text / text parts joined); other parts refused
// by type.
std::string text_of(const json &content, const std::string &where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw BadRequest(where + " must be a string or an array of content parts");
  std::string out;
  for (const json &part : content) {
    const std::string type = part.is_object() ? string_or(part, "type") : "";
    if ((type != "input_text" && type != "output_text" && type != "text") || !part.contains("text") || !part["text"].is_string())
      throw BadRequest(where + ": a '" + type + "' part is not supported (input_text and output_text are)");
    out += part["text"].get<std::string>();
  }
  return out;
}

// A reasoning item's text: its reasoning_text content, else its summary.
std::string reasoning_of(const json &item) {
  std::string out;
  for (const char *key : {"content", "summary"}) {
    const auto it = item.find(key);
    if (it == item.end() || !it->is_array()) continue;
    for (const json &part : *it)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) out += part["text"].get<std::string>();
    if (!out.empty()) break;
  }
  return out;
}

json message_item(const std::string &id, const std::string &status, const std::string &text) {
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"},
          {"content", json::array({{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}}})}};
}
json reasoning_item(const std::string &id, const std::string &text) {
  return {{"type", "reasoning"}, {"id", id}, {"summary", json::array()}, {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}
json call_item(int64_t request_id, size_t n, const std::string &status, const std::string &name, const std::string &arguments) {
  return {{"type", "function_call"}, {"id", "fc_" + std::to_string(request_id) + "_" + std::to_string(n)}, {"call_id", tool_call_id(request_id, n)},
          {"name", name}, {"arguments", arguments}, {"status", status}};
}

json usage_json(int64_t input, int64_t output, int64_t cached, int64_t reasoning) {
  return {{"input_tokens", input}, {"input_tokens_details", {{"cached_tokens", cached}}}, {"output_tokens", output},
          {"output_tokens_details", {{"reasoning_tokens", reasoning}}}, {"total_tokens", input + output}};
}

// The shell with its final status, output and usage.
json finished(json shell, json output, const std::string &finish, json usage) {
  const bool cut = finish == "length";
  shell["status"] = cut ? "incomplete" : "completed";
  shell["incomplete_details"] = cut ? json{{"reason", "max_output_tokens"}} : json(nullptr);
  shell["output"] = std::move(output);
  shell["usage"] = std::move(usage);
  return shell;
}

}  // namespace

ResponsesRequest responses_request(const json &body, const json &previous) {
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
  if (const auto it = body.find("conversation"); it != body.end() && !it->is_null())
    throw BadRequest("'conversation' is not supported: continue a response with 'previous_response_id', or send the whole conversation in 'input'");
  if (const auto it = body.find("background"); it != body.end() && *it == true) throw BadRequest("'background' responses are not supported: stream the response instead");
  if (const auto it = body.find("top_logprobs"); it != body.end() && !it->is_null() && *it != 0)
    throw BadRequest("'top_logprobs' is not supported on /v1/responses; /v1/chat/completions returns logprobs");
  json out = json::object();
  for (const char *k : {"temperature", "top_p", "stream", "parallel_tool_calls", "seed"})
    if (const auto it = body.find(k); it != body.end() && !it->is_null()) out[k] = *it;
  if (const auto it = body.find("max_output_tokens"); it != body.end() && !it->is_null()) out["max_tokens"] = *it;

  json messages = previous.is_array() ? previous : json::array();
  const auto input = body.find("input");
  if (input == body.end() || (!input->is_string() && !input->is_array()) || (input->is_array() && input->empty()))
    throw BadRequest("'input' must be a string or a non-empty array of input items");
  std::string reasoning;  // a reasoning item's text, for the assistant message after it
  const auto assistant = [&]() -> json & {  // the assistant message this turn's items join
    if (messages.empty() || messages.back()["role"] != "assistant") messages.push_back({{"role", "assistant"}, {"content", ""}});
    json &m = messages.back();
    if (!reasoning.empty()) m["reasoning_content"] = reasoning, reasoning.clear();
    return m;
  };
  json items = json::array();  // the input as items, for GET .../input_items
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
    items.push_back({{"type", "message"}, {"role", "user"}, {"content", json::array({{{"type", "input_text"}, {"text", *input}}})}});
  }
  for (size_t i = 0; input->is_array() && i < input->size(); ++i) {
    json item = (*input)[i];
    if (item.is_object() && !item.contains("type") && item.contains("role")) item["type"] = "message";
    if (item.is_object() && string_or(item, "type") == "message" && item.contains("content") && item["content"].is_string())
      item["content"] = json::array({{{"type", string_or(item, "role") == "assistant" ? "output_text" : "input_text"}, {"text", item["content"]}}});
    items.push_back(std::move(item));
  }
  for (size_t i = 0; input->is_array() && i < input->size(); ++i) {
    const json &item = (*input)[i];
    const std::string where = "'input[" + std::to_string(i) + "]'";
    if (!item.is_object()) throw BadRequest(where + " must be an object (a message or an item)");
    const std::string type = string_or(item, "type", item.contains("role") ? "message" : "");
    if (type == "message") {
      std::string role = string_or(item, "role");
      if (role == "developer") role = "system";
      if (role != "user" && role != "system" && role != "assistant") throw BadRequest(where + ".role must be user, assistant, system or developer");
      if (!item.contains("content")) throw BadRequest(where + " has no content");
      const std::string text = text_of(item["content"], where + ".content");
      if (role == "assistant") {
        json &m = assistant();
        m["content"] = m["content"].is_string() ? json(m["content"].get<std::string>() + text) : json(text);
      } else {
        messages.push_back({{"role", role}, {"content", text}});
      }
    } else if (type == "function_call") {
      if (!item.contains("name") || !item["name"].is_string() || !item.contains("call_id") || !item["call_id"].is_string())
        throw BadRequest(where + ": a function_call needs its name and call_id");
      const json args = item.value("arguments", json("{}"));
      if (!args.is_string()) throw BadRequest(where + ".arguments must be JSON text (a string)");
      json &m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      m["tool_calls"].push_back({{"id", item["call_id"]}, {"type", "function"}, {"function", {{"name", item["name"]}, {"arguments", args}}}});
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string()) throw BadRequest(where + ": a function_call_output needs its call_id");
      const std::string output = item.contains("output") && !item["output"].is_null() ? text_of(item["output"], where + ".output") : "";
      messages.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output}});
    } else if (type == "reasoning") {
      reasoning += reasoning_of(item);
    } else {
      throw BadRequest(where + ": '" + type + "' items are not supported (messages, function_call, function_call_output and reasoning are)");
    }
  }
  // An assistant message with calls and no text: content null, as chat clients send it.
  for (json &m : messages)
    if (m["role"] == "assistant" && m.contains("tool_calls") && m["content"] == "") m["content"] = nullptr;
  json chat_messages = json::array();
  if (const auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) throw BadRequest("'instructions' must be a string");
    chat_messages.push_back({{"role", "system"}, {"content", *it}});
  }
  for (const json &m : messages) chat_messages.push_back(m);
  out["messages"] = std::move(chat_messages);

  if (const auto ts = body.find("tools"); ts != body.end() && !ts->is_null()) {
    if (!ts->is_array()) throw BadRequest("'tools' must be an array of {type: \"function\", name, parameters}");
    json tools = json::array();
    for (const json &t : *ts) {
      const std::string type = t.is_object() ? string_or(t, "type") : "";
      if (type != "function") throw BadRequest("'tools': only function tools are supported, not '" + type + "' (hosted tools run on OpenAI's side)");
      if (!t.contains("name") || !t["name"].is_string()) throw BadRequest("'tools': a function tool needs its name");
      json f = {{"name", t["name"]}, {"parameters", t.contains("parameters") && !t["parameters"].is_null() ? t["parameters"] : json{{"type", "object"}}}};
      for (const char *k : {"description", "strict"})
        if (t.contains(k) && !t[k].is_null()) f[k] = t[k];
      tools.push_back({{"type", "function"}, {"function", std::move(f)}});
    }
    out["tools"] = std::move(tools);
  }
  if (const auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
    if (tc->is_string()) out["tool_choice"] = *tc;
    else if (tc->is_object() && tc->value("type", "") == "function" && tc->contains("name")) out["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    else throw BadRequest("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": N}");
  }
  if (const auto tx = body.find("text"); tx != body.end() && tx->is_object()) {
    if (const auto f = tx->find("format"); f != tx->end() && f->is_object()) {
      const std::string type = f->value("type", "");
      if (type == "json_object") {
        out["response_format"] = {{"type", "json_object"}};
      } else if (type == "json_schema") {
        json js = {{"name", f->value("name", std::string("response"))}};
        for (const char *k : {"schema", "strict", "description"})
          if (f->contains(k)) js[k] = (*f)[k];
        out["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
      } else if (type != "text") {
        throw BadRequest("'text.format.type' must be text, json_object or json_schema");
      }
    }
  }
  if (const auto rs = body.find("reasoning"); rs != body.end() && rs->is_object())
    if (const auto e = rs->find("effort"); e != rs->end() && !e->is_null()) {
      // As chat's reasoning_effort (template_kwargs), refused here under this request's own name.
      if (!reasoning_effort_known(*e))
        throw BadRequest("'reasoning.effort' must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\", not " + e->dump());
      out["reasoning_effort"] = *e;
    }
  return {std::move(out), std::move(messages), std::move(items)};
}

json input_items_page(const json &items, const std::string &order, int64_t limit, const std::string &after) {
  if (order != "asc" && order != "desc") throw BadRequest("'order' must be \"asc\" or \"desc\"");
  if (limit < 1 || limit > 100) throw BadRequest("'limit' must be from 1 to 100");
  std::vector<json> all(items.begin(), items.end());
  if (order == "desc") std::reverse(all.begin(), all.end());
  size_t from = 0;
  if (!after.empty()) {
    while (from < all.size() && string_or(all[from], "id") != after) ++from;
    if (from == all.size()) throw BadRequest("'after': no input item '" + after + "' in this response");
    ++from;
  }
  json data = json::array();
  for (size_t i = from; i < all.size() && int64_t(data.size()) < limit; ++i) data.push_back(all[i]);
  const bool more = from + data.size() < all.size();
  return {{"object", "list"}, {"data", data}, {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
          {"last_id", data.empty() ? json(nullptr) : data.back()["id"]}, {"has_more", more}};
}

json assistant_turn(const json &output) {
  std::string text, reasoning;
  json calls = json::array();
  for (const json &item : output) {
    const std::string type = string_or(item, "type");
    if (type == "message" || type == "reasoning")
      for (const json &part : item.value("content", json::array())) (type == "message" ? text : reasoning) += string_or(part, "text");
    else if (type == "function_call")
      calls.push_back({{"id", item["call_id"]}, {"type", "function"}, {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
  }
  json turn = {{"role", "assistant"}, {"content", calls.empty() || !text.empty() ? json(text) : json(nullptr)}};
  if (!reasoning.empty()) turn["reasoning_content"] = reasoning;
  if (!calls.empty()) turn["tool_calls"] = std::move(calls);
  return turn;
}

json response_shell(const json &body, const std::string &id, const std::string &model, int64_t created) {
  const auto echo = [&](const char *k, json fallback) {
    const auto it = body.find(k);
    return it == body.end() || it->is_null() ? fallback : *it;
  };
  json text = echo("text", json::object());
  if (!text.is_object() || !text.contains("format")) text = {{"format", {{"type", "text"}}}};
  json reasoning = echo("reasoning", json::object());
  if (!reasoning.is_object()) reasoning = json::object();
  if (!reasoning.contains("effort")) reasoning["effort"] = nullptr;
  if (!reasoning.contains("summary")) reasoning["summary"] = nullptr;
  return {{"id", id}, {"object", "response"}, {"created_at", created}, {"status", "in_progress"}, {"error", nullptr},
          {"incomplete_details", nullptr}, {"instructions", echo("instructions", nullptr)}, {"max_output_tokens", echo("max_output_tokens", nullptr)},
          {"model", model}, {"output", json::array()}, {"parallel_tool_calls", echo("parallel_tool_calls", true)},
          {"previous_response_id", echo("previous_response_id", nullptr)}, {"reasoning", std::move(reasoning)}, {"store", echo("store", true) != false},
          {"temperature", echo("temperature", 1.0)}, {"text", std::move(text)}, {"tool_choice", echo("tool_choice", "auto")},
          {"tools", echo("tools", json::array())}, {"top_p", echo("top_p", 1.0)}, {"truncation", "disabled"}, {"usage", nullptr},
          {"user", echo("user", nullptr)}, {"metadata", echo("metadata", json::object())}};
}

json response_object(json shell, const ResponsesReply &r) {
  const std::string rid = std::to_string(r.request_id);
  json output = json::array();
  if (!r.reasoning.empty()) output.push_back(reasoning_item("rs_" + rid + "_0", r.reasoning));
  // A message where there is text, or nothing else (as the stream opens one only for text);
  // numbered by its place, as the stream numbers it.
  if (!r.content.empty() || (r.calls.empty() && r.reasoning.empty()))
    output.push_back(message_item("msg_" + rid + "_" + std::to_string(output.size()), r.finish == "length" ? "incomplete" : "completed", r.content));
  for (size_t i = 0; i < r.calls.size(); ++i) output.push_back(call_item(r.request_id, i, "completed", r.calls[i].name, r.calls[i].arguments));
  return finished(std::move(shell), std::move(output), r.finish,
                  usage_json(r.input_tokens, r.output_tokens, r.cached_tokens, r.reasoning_tokens));
}

std::string ResponsesStream::event(const char *type, json data) {
  data["type"] = type;
  data["sequence_number"] = seq_++;
  return std::string("event: ") + type + "\ndata: " + dump(data) + "\n\n";
}

std::string ResponsesStream::start() {
  std::string out = event("response.created", {{"response", shell_}});
  out += event("response.in_progress", {{"response", shell_}});
  return out;
}

// (Each piece is built statement by statement: the operands of + are evaluated in no fixed
// order, and open() moves the output index.)
std::string ResponsesStream::open(const char *kind, json item, const char *id_prefix) {
  if (open_ == kind && open_ != "function_call") return "";
  std::string out = close();
  const size_t index = output_.size();
  if (id_prefix) item["id"] = std::string(id_prefix) + std::to_string(request_id_) + "_" + std::to_string(index);  // numbered after the close
  open_ = kind, text_.clear(), item_ = std::move(item);
  out += event("response.output_item.added", {{"output_index", index}, {"item", item_}});
  if (open_ == "message")
    out += event("response.content_part.added", {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0},
                                                 {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}, {"logprobs", json::array()}}}});
  else if (open_ == "reasoning")
    out += event("response.content_part.added", {{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0},
                                                 {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
  return out;
}

std::string ResponsesStream::close(bool cut) {
  if (open_.empty()) return "";
  const size_t index = output_.size();
  const json id = item_["id"];
  std::string out;
  if (open_ == "message") {
    out += event("response.output_text.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}, {"logprobs", json::array()}});
    out += event("response.content_part.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0},
                                                {"part", {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}, {"logprobs", json::array()}}}});
    item_ = message_item(id.get<std::string>(), cut ? "incomplete" : "completed", text_);
  } else if (open_ == "reasoning") {
    out += event("response.reasoning_text.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}});
    out += event("response.content_part.done", {{"item_id", id}, {"output_index", index}, {"content_index", 0},
                                                {"part", {{"type", "reasoning_text"}, {"text", text_}}}});
    item_ = reasoning_item(id.get<std::string>(), text_);
  } else {
    out += event("response.function_call_arguments.done", {{"item_id", id}, {"output_index", index}, {"arguments", text_}});
    item_["arguments"] = text_, item_["status"] = cut ? "incomplete" : "completed";
  }
  out += event("response.output_item.done", {{"output_index", index}, {"item", item_}});
  output_.push_back(std::move(item_));
  open_.clear(), text_.clear(), item_ = nullptr;
  return out;
}

std::string ResponsesStream::reasoning(const std::string &piece) {
  if (piece.empty()) return "";
  std::string out = open("reasoning", {{"type", "reasoning"}, {"id", ""}, {"summary", json::array()}, {"content", json::array()}}, "rs_");
  text_ += piece, reasoning_all_ += piece;
  out += event("response.reasoning_text.delta", {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"content_index", 0}, {"delta", piece}});
  return out;
}

std::string ResponsesStream::text(const std::string &piece) {
  if (piece.empty()) return "";
  std::string out = open("message", {{"type", "message"}, {"id", ""}, {"status", "in_progress"}, {"role", "assistant"}, {"content", json::array()}}, "msg_");
  text_ += piece;
  out += event("response.output_text.delta",
               {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"content_index", 0}, {"delta", piece}, {"logprobs", json::array()}});
  return out;
}

std::string ResponsesStream::call_begin(size_t n, const std::string &name) {
  return open("function_call", call_item(request_id_, n, "in_progress", name, ""));
}

std::string ResponsesStream::call_arguments(const std::string &piece) {
  if (piece.empty() || open_ != "function_call") return "";
  text_ += piece;
  return event("response.function_call_arguments.delta", {{"item_id", item_["id"]}, {"output_index", output_.size()}, {"delta", piece}});
}

std::string ResponsesStream::calls(const std::vector<chat::ToolCall> &calls, size_t first) {
  std::string out;
  for (size_t i = 0; i < calls.size(); ++i) {
    out += call_begin(first + i, calls[i].name);
    out += call_arguments(calls[i].arguments);
  }
  return out;
}

std::string ResponsesStream::finish(const std::string &finish, int64_t input_tokens, int64_t output_tokens, int64_t cached_tokens,
                                    int64_t reasoning_tokens) {
  std::string out = close(finish == "length");  // the item the token limit cut is incomplete
  const json response = finished(shell_, output_, finish, usage_json(input_tokens, output_tokens, cached_tokens, reasoning_tokens));
  out += event(response["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", response}});
  final_ = response;
  return out;
}

std::string ResponsesStream::error(const std::string &message) {
  std::string out = close();
  out += event("error", {{"code", "server_error"}, {"message", message}, {"param", nullptr}});
  json response = shell_;
  response["status"] = "failed";
  response["error"] = {{"code", "server_error"}, {"message", message}};
  response["output"] = output_;
  out += event("response.failed", {{"response", std::move(response)}});
  return out;
}

void ResponseStore::put(const std::string &id, Entry e) {
  const size_t bytes = e.response.dump().size() + e.conversation.dump().size();
  std::lock_guard<std::mutex> lock(m_);
  if (const auto it = by_id_.find(id); it != by_id_.end()) {
    bytes_ -= it->second->bytes;
    order_.erase(it->second);
    by_id_.erase(it);
  }
  order_.push_back({id, std::move(e), bytes});
  by_id_[id] = std::prev(order_.end());
  bytes_ += bytes;
  while (order_.size() > 1 && (order_.size() > max_entries_ || bytes_ > max_bytes_)) {
    bytes_ -= order_.front().bytes;
    by_id_.erase(order_.front().id);
    order_.pop_front();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string &id) const {
  std::lock_guard<std::mutex> lock(m_);
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  return it->second->entry;
}

bool ResponseStore::erase(const std::string &id) {
  std::lock_guard<std::mutex> lock(m_);
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  bytes_ -= it->second->bytes;
  order_.erase(it->second);
  by_id_.erase(it);
  return true;
}

}  // namespace minfer::server
