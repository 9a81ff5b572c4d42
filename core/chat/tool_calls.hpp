// core/chat/tool_calls.hpp — function calling: which way a model's chat template writes its
// tool calls, and those calls read back out of the text the model generated.
//
// The tools themselves go to the template as its `tools` variable (transformers' convention);
// the template shows them to the model in the model's own words. What comes back is text in
// the model family's own syntax. Four families are read (the format is told by the template
// source, as llama.cpp's common/chat does):
//   hermes   <tool_call>{"name": N, "arguments": {...}}</tool_call>  (Qwen 2.5 / 3, Hermes)
//   llama3   {"name": N, "parameters": {...}}, the whole reply, <|python_tag|> optional
//   mistral  [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]  (Nemo) or
//            [TOOL_CALLS]N[ARGS]{...}  (Small 3.2 and later)
//   granite  <|tool_call|>[{"name": N, "arguments": {...}}, ...]
// Templates that take tools in another syntax (DeepSeek, GLM, gpt-oss's harmony, Gemma 4)
// are `unsupported`: a request with tools is refused rather than its calls left unread.
// Markers such as [TOOL_CALLS] and <|python_tag|> are control tokens: a reply that may hold
// calls is decoded with special tokens shown.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/json.hpp"

namespace minfer::chat {

enum class ToolFormat { none, hermes, llama3, mistral, granite, unsupported };

// none: the template never reads `tools`.
ToolFormat tool_format_of(const std::string &template_source);
const char *tool_format_name(ToolFormat f);
// Mistral templates that write a call as name[ARGS]{...} (Small 3.2 and later), not a JSON list.
bool mistral_name_args(const std::string &template_source);
// The markers of a format's calls, which vocabularies often hold as control tokens
// ([TOOL_CALLS], [ARGS], <|tool_call|>, <|python_tag|>, <tool_call>).
std::vector<std::string> tool_call_markers(ToolFormat f);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's function.arguments)
};

// A reply split into what the model said and the calls it made. Text that looks like a call
// but does not parse (a cut-off reply, a malformed object) stays in `content`, no call made.
struct ParsedReply {
  std::string content;  // the text outside the calls, trimmed of surrounding whitespace
  std::vector<ToolCall> calls;
};
ParsedReply parse_tool_calls(ToolFormat f, const std::string &text);

// For streaming: how much of a growing reply is surely not part of a call (the text before a
// call's marker, or before a tail that could still become one). The rest waits for the end.
size_t plain_text_before_calls(ToolFormat f, const std::string &text);

// Streaming tool calls while they are written, as OpenAI streams them: a call's name once it
// is whole, then its arguments' text as it grows. advance() is given the whole reply so far and
// where the held-back text begins. Every format above streams: hermes' <tool_call>s, Llama 3's
// JSON reply (";"-separated calls), Mistral's [TOOL_CALLS] list or name[ARGS]{...}, Granite's
// <|tool_call|> list; a call object must read {"name": N, "arguments" (Llama 3: "parameters"):
// {...}} (the order tool_choice's constraint keeps). A call written otherwise stops the
// streaming: it and those after it come whole at the end, from parse_tool_calls (`streamed`
// says how many went out before).
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolFormat f = ToolFormat::hermes) : format_(f) {}
  struct Event {
    size_t index = 0;
    bool start = false;  // the call begins: `text` is its name; else `text` extends its arguments
    std::string text;
  };
  std::vector<Event> advance(const std::string &reply, size_t held_from);
  size_t streamed() const { return started_; }  // calls begun

 private:
  // marker: looking for the format's opening; head: a call object's name and arguments key;
  // args: its arguments object; after: what follows a call (the object's '}', then a list's
  // ',' or ']', or Llama 3's ';').
  enum class At { marker, head, args, after, stopped };
  ToolFormat format_;
  At at_ = At::marker;
  size_t pos_ = std::string::npos;  // where reading stands in the reply
  size_t started_ = 0;
  bool in_list_ = false;  // the calls are a JSON list (Mistral's, Granite's)
  bool name_args_ = false;  // the call just read was Mistral's name[ARGS]{...}
  json::NestingScan scan_;  // the arguments object being written
};

}  // namespace minfer::chat
