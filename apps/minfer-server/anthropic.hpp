// apps/minfer-server/anthropic.hpp — Anthropic's Messages API (POST /v1/messages and
// /v1/messages/count_tokens) over the chat path, for agents and SDKs that speak it. A request
// becomes an OpenAI chat request (one parser, openai.hpp, checks its fields); the reply is
// Anthropic's: content blocks (thinking, text, tool_use), stop_reason, usage, and its stream of
// named events (message_start, content_block_start/delta/stop, message_delta, message_stop).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/tool_calls.hpp"
#include "openai.hpp"

namespace minfer::server {

// system (a string or text blocks) -> a system message; user text and tool_result blocks ->
// user and tool messages; assistant text, tool_use and thinking blocks -> content, tool_calls
// and reasoning_content; tools' input_schema -> parameters; tool_choice auto/any/tool/none ->
// auto/required/a named function/none; stop_sequences -> stop; thinking enabled/disabled ->
// the template's enable_thinking. Images, documents and server tools are refused. Throws
// BadRequest.
json anthropic_to_openai(const json &body);

// Why a reply ended, in Anthropic's words: "tool_use", "max_tokens", "stop_sequence", "end_turn".
std::string anthropic_stop_reason(const std::string &finish, const std::string &stop_word, bool called);

// A whole reply. calls' arguments are JSON text (they become `input` objects).
struct AnthropicReply {
  std::string id, model, reasoning, content, stop_reason, stop_word;
  std::vector<chat::ToolCall> calls;
  int64_t request_id = 0, input_tokens = 0, output_tokens = 0, cached_tokens = 0;
};
json anthropic_message(const AnthropicReply &r);

// Anthropic's error object: {"type": "error", "error": {"type", "message"}}, its type told by
// the HTTP status.
json anthropic_error(int status, const std::string &message);

// The stream's events as server-sent-event text (`event: NAME\ndata: JSON\n\n`), content
// blocks opened and closed as the pieces change kind.
class AnthropicStream {
 public:
  AnthropicStream(std::string id, std::string model, int64_t input_tokens, int64_t cached_tokens)
      : id_(std::move(id)), model_(std::move(model)), input_(input_tokens), cached_(cached_tokens) {}
  std::string start();
  std::string thinking(const std::string &piece);
  std::string text(const std::string &piece);
  std::string tool_uses(const std::vector<chat::ToolCall> &calls, int64_t request_id, size_t first = 0);  // whole calls
  std::string tool_use_begin(int64_t request_id, size_t n, const std::string &name);  // a call streamed as it is written:
  std::string tool_input(const std::string &piece);                                   // its input's text, piece by piece
  std::string finish(const std::string &stop_reason, const std::string &stop_word, int64_t output_tokens);
  std::string error(const std::string &message);

 private:
  std::string block(const char *type, const json &start);  // closes the open block if another kind
  std::string close();
  std::string id_, model_;
  int64_t input_ = 0, cached_ = 0;
  int index_ = -1;
  std::string open_;  // the kind of the open block, "" when none
};

}  // namespace minfer::server
