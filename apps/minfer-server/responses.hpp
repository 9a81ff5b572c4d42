// apps/minfer-server/responses.hpp — OpenAI's Responses API (POST /v1/responses) over the chat
// path, for the agent frameworks and clients that speak it (OpenAI's Agents SDK and Codex CLI
// use it by default). A request becomes an OpenAI chat request (one parser, openai.hpp, checks
// its fields); the reply is a response object: output items (reasoning, message, function
// calls), status, usage; streamed as its semantic events (response.created ...
// response.completed), each with a sequence number. A conversation comes whole in `input`, or
// continues a kept response (previous_response_id; ResponseStore keeps the latest in memory).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "chat/tool_calls.hpp"
#include "openai.hpp"

namespace minfer::server {

// instructions -> a system message; input (a string, or items: messages with text parts,
// function_call, function_call_output and reasoning items) -> messages, consecutive
// function_calls into one assistant message with tool_calls, a reasoning item into the next
// assistant message's reasoning_content; tools (flat {type: "function", name, parameters}) ->
// chat tools; tool_choice, parallel_tool_calls, temperature, top_p; max_output_tokens ->
// max_tokens; text.format json_schema / json_object -> response_format; reasoning.effort ->
// chat's reasoning_effort (template_kwargs). Images, files,
// hosted tools, background and conversation are refused. previous: the conversation a
// previous_response_id names (its messages, the instructions aside: those are not carried
// over), put before the input. Throws BadRequest.
struct ResponsesRequest {
  json openai;        // the chat request
  json conversation;  // its messages after the instructions: what a later response continues
  json input_items;   // its input as items (a string: one user message), for GET .../input_items
};
ResponsesRequest responses_request(const json &body, const json &previous = json::array());

// GET /v1/responses/{id}/input_items: a page of a kept response's input items (OpenAI's
// cursor list: order "desc", the default, or "asc"; limit 1..100, default 20; after an id).
// Throws BadRequest.
json input_items_page(const json &items, const std::string &order, int64_t limit, const std::string &after);

// The assistant turn of a response's output items (message text, reasoning, function calls
// with their call_ids), as a chat message: what a later response sees of it.
json assistant_turn(const json &output);

// The response object before any output: the request's settings as OpenAI echoes them
// (store: whether it will be kept), status "in_progress".
json response_shell(const json &body, const std::string &id, const std::string &model, int64_t created);

// A whole reply: its output items, status ("incomplete" with reason max_output_tokens where
// finish is "length") and usage. calls' arguments are JSON text.
struct ResponsesReply {
  std::string reasoning, content, finish;
  std::vector<chat::ToolCall> calls;
  int64_t request_id = 0, input_tokens = 0, output_tokens = 0, cached_tokens = 0, reasoning_tokens = 0;
};
json response_object(json shell, const ResponsesReply &r);

// The stream's events as server-sent-event text (`event: TYPE\ndata: JSON\n\n`): output items
// opened and closed as the pieces change kind, each with its content part and done events.
class ResponsesStream {
 public:
  ResponsesStream(json shell, int64_t request_id) : shell_(std::move(shell)), request_id_(request_id) {}
  std::string start();  // response.created, response.in_progress
  std::string reasoning(const std::string &piece);
  std::string text(const std::string &piece);
  std::string calls(const std::vector<chat::ToolCall> &calls, size_t first = 0);  // whole calls
  std::string call_begin(size_t n, const std::string &name);                      // a call streamed as it is written:
  std::string call_arguments(const std::string &piece);                           // its arguments' text, piece by piece
  // response.completed (or .incomplete) with the whole response.
  std::string finish(const std::string &finish, int64_t input_tokens, int64_t output_tokens, int64_t cached_tokens, int64_t reasoning_tokens);
  std::string error(const std::string &message);  // an error event, then response.failed
  const std::string &reasoning_text() const { return reasoning_all_; }
  const json &final_response() const { return final_; }  // after finish()

 private:
  std::string event(const char *type, json data);
  // Closes the open item if another kind (calls: always), then opens `item`, its id
  // id_prefix<request>_<output index> where given.
  std::string open(const char *kind, json item, const char *id_prefix = nullptr);
  std::string close(bool cut = false);
  json shell_;
  int64_t request_id_ = 0, seq_ = 0;
  json output_ = json::array();  // the items closed so far
  json item_;                    // the open one
  std::string open_, text_;      // its kind ("" when none) and its text or arguments so far
  std::string reasoning_all_;
  json final_;
};

// Responses kept for previous_response_id and GET/DELETE /v1/responses/{id}: the latest
// `max_entries` in memory, fewer where they would pass `max_bytes`; the oldest go first.
class ResponseStore {
 public:
  struct Entry {
    json response;      // the response object, as returned
    json conversation;  // the messages it continued plus its own turn
    json input_items;   // its request's input items, ids given where they had none
  };
  explicit ResponseStore(size_t max_entries = 1024, size_t max_bytes = size_t(128) << 20) : max_entries_(max_entries), max_bytes_(max_bytes) {}
  void put(const std::string &id, Entry e);
  std::optional<Entry> get(const std::string &id) const;
  bool erase(const std::string &id);
  size_t max_entries() const { return max_entries_; }

 private:
  struct Kept {
    std::string id;
    Entry entry;
    size_t bytes;
  };
  mutable std::mutex m_;
  std::list<Kept> order_;  // oldest first
  std::map<std::string, std::list<Kept>::iterator> by_id_;
  size_t bytes_ = 0, max_entries_, max_bytes_;
};

}  // namespace minfer::server
