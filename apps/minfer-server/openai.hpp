// apps/minfer-server/openai.hpp — the OpenAI API's request fields as minfer takes them, and
// its response objects: no HTTP here, so every rule is testable on its own (SERVING.md).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_calls.hpp"
#include "sampling/gbnf.hpp"
#include "sampling/json_schema.hpp"
#include "sampling/sampler.hpp"

namespace minfer::server {

// Objects keep their keys in order: a client's tool schemas reach the chat template as written
// (Python's dicts keep order, and the model saw them so), and responses list id, object,
// created, ... as OpenAI's do.
using json = nlohmann::ordered_json;

// A request the server refuses: HTTP 400 with this message (it names the field).
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// obj[key] when it is a string, else dflt (absent, null or another type): json::value would
// throw a type_error for {"type": 1}, which the server could only answer with a 500; callers
// refuse a value they do not know, naming the field. obj need not be an object (then dflt).
inline std::string string_or(const json &obj, const char *key, const std::string &dflt = "") {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : dflt;
}

// A request body as JSON. Nesting past json::kMaxNesting (128) levels is refused before
// parsing: copying or printing such a value recurses once per level, and 60,000 levels took a
// connection thread's stack (and the server) with them. Throws BadRequest.
json parse_body(const std::string &text);

// What a completion or chat request asks for, apart from its prompt.
struct GenerationParams {
  int64_t max_tokens = -1;  // -1: until the end of generation or the context
  int64_t n = 1;            // choices: n sequences of the same prompt, seeds seed, seed + 1, ...
  sampling::Config sampling;
  std::vector<std::string> stop;  // not included in the output
  bool stream = false, include_usage = false;
  bool echo = false;      // completions: the prompt's text before the completion's
  int32_t logprobs = -1;  // -1: none; n >= 0: each token's log-probability and the n likeliest (SeqRequest::logprobs)
  // response_format json_schema (its schema) or json_object (any object): the reply is one
  // value of it, by constrained decoding. Null: free text.
  std::shared_ptr<const sampling::Schema> response_schema;
  // vLLM's: the end-of-generation tokens are refused (and stop strings not looked for) until
  // min_tokens tokens are out; ignore_eos refuses them throughout (a benchmark's fixed lengths).
  int64_t min_tokens = 0;
  bool ignore_eos = false;
  // vLLM's stop_token_ids: sampling one of these ends the reply ("stop"; its text left out),
  // once min_tokens are out (before, they are refused as the end is).
  std::vector<int32_t> stop_token_ids;
  // llama.cpp's grammar (GBNF text, compiled): the reply is root's text, by constrained decoding.
  std::shared_ptr<const sampling::Grammar> grammar;
  // DRY's sequence breakers as texts (llama.cpp's default: newline, colon, quote, asterisk);
  // the server turns them into the tokens that hold one (sampling.dry_breakers).
  std::vector<std::string> dry_breakers{"\n", ":", "\"", "*"};
};

// Which API a request came through: their fields differ where logprobs are concerned
// (chat: logprobs true + top_logprobs 0..20; completions: logprobs 0..5, a count).
enum class Api { chat, completions };

// The fields every completion request shares (max_tokens/max_completion_tokens, temperature,
// top_p, top_k, min_p, seed, stop, n, presence/frequency/repeat penalties and repeat_last_n,
// logprobs, response_format, stream, stream_options). defaults: the run config's sampling; seed: the one to use when the
// request gives none. Throws BadRequest.
GenerationParams parse_generation(const json &body, const sampling::Config &defaults, uint64_t seed, Api api = Api::completions);

// A chat request's messages as the chat template takes them: each {role, content, ...} with
// content a string (an array of text parts is joined); an assistant message's tool_calls with
// their arguments as objects (clients send them as JSON text; templates write them with
// tojson). Throws BadRequest.
json chat_messages(const json &body);

// A chat request's `tools` (OpenAI's [{type: "function", function: {name, description,
// parameters}}]) and `tool_choice`. `offered`: the tools go to the template and the reply is
// read for calls ("auto", the default with tools, "required", a named function); "none" or no
// tools: not offered. `forced`: "required" (every tool's name) or a named function: the reply
// must be a call of one of them (constrained decoding). Throws BadRequest.
struct ToolsRequest {
  json tools = json::array();
  bool offered = false;
  std::vector<std::string> forced;
  bool parallel = true;  // parallel_tool_calls: false allows one call at most
};
ToolsRequest parse_tools(const json &body);

// A chat request's `chat_template_kwargs` (as vLLM and llama-server take it): more variables for
// the template, e.g. {"enable_thinking": false} for Qwen 3. The template's own inputs
// (messages, add_generation_prompt, bos_token, eos_token, tools) cannot be set so. OpenAI's
// `reasoning_effort` adds reasoning_effort and enable_thinking (false for "none" and
// "minimal") where those do not set them. Throws BadRequest.
json template_kwargs(const json &body);
// Whether an effort is one of OpenAI's: none, minimal, low, medium, high.
bool reasoning_effort_known(const json &effort);

// A chat request's `reasoning_format` (llama-server's): "auto" (the default) or "deepseek": a
// thinking model's <think> block comes back as message.reasoning_content (streamed as
// delta.reasoning_content), the rest as content; "none": all of it as content. Throws
// BadRequest.
bool reasoning_split(const json &body);

// A reply's calls as OpenAI's message.tool_calls (streaming: with their "index"); ids
// `call_<request id>_<n>`, n counted from `first` (calls streamed before these).
json tool_calls_json(const std::vector<chat::ToolCall> &calls, int64_t request_id, bool streaming, size_t first = 0);
std::string tool_call_id(int64_t request_id, size_t n);

// /v1/completions' prompt: a string (text to tokenize) or an array of token ids (returned in
// ids, text left empty). Throws BadRequest.
struct PromptField {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};
PromptField completion_prompt(const json &body);  // exactly one prompt
// /v1/completions' prompts: a string, an array of token ids, or an array of either (OpenAI's
// batch: each prompt its own n choices); at most kMaxPrompts.
inline constexpr size_t kMaxPrompts = 64;
std::vector<PromptField> completion_prompts(const json &body);

// /v1/embeddings: `input` a string, an array of strings, an array of token ids or an array of
// those (at most 2,048 inputs); `encoding_format` "float" or "base64" (little-endian f32, what
// OpenAI's Python client asks for by default); `dimensions` (keep the first N values, then
// normalise: Matryoshka models). Throws BadRequest.
struct EmbeddingRequest {
  std::vector<PromptField> inputs;
  bool base64 = false;
  int64_t dimensions = 0;  // 0: all
};
EmbeddingRequest parse_embeddings(const json &body);
// The first `dims` values (0: all) scaled to unit length; as JSON numbers or base64 text.
std::vector<float> unit_embedding(const std::vector<float> &v, int64_t dims);
json embedding_json(const std::vector<float> &v, bool base64);

// Stop strings over a growing text. After each piece: `stopped` when a stop string occurs (the
// text is cut where the first one begins), and `safe` bytes of the text that can be shown
// now: the rest might be the start of a stop string. Only stop strings beginning at `from` or
// after count (the text of a request's first min_tokens tokens is passed over).
struct StopCheck {
  size_t safe = 0;
  bool stopped = false;
  std::string word;  // the stop string found
};
StopCheck check_stops(std::string &text, const std::vector<std::string> &stops, size_t from = 0);

// Token log-probabilities as each API reports them; `bytes` gives a token's bytes (a piece of
// UTF-8, or not one: the JSON text gets U+FFFD where it is not, `bytes` stays exact).
// chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}
// completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}
// (text_offset counted from `offset` bytes into the completion).
using TokenBytes = std::function<std::string(int32_t)>;
json byte_list(const std::string &bytes);  // a token's bytes as the APIs' "bytes": [int, ...]
json chat_logprobs(const std::vector<sampling::TokenLogprobs> &lp, const TokenBytes &bytes);
json completion_logprobs(const std::vector<sampling::TokenLogprobs> &lp, const TokenBytes &bytes, size_t offset = 0);
// Completions' echo with logprobs: the prompt's tokens first (the first with null entries, the
// others from prompt_lp: each given the tokens before it), then the generated ones, their
// offsets from generated_offset (the echoed prompt's length).
json echo_logprobs(const std::vector<int32_t> &prompt, const std::vector<sampling::TokenLogprobs> &prompt_lp,
                   const std::vector<sampling::TokenLogprobs> &generated, const TokenBytes &bytes, size_t generated_offset);

// OpenAI's error object: {"error": {"message", "type", "code"}}.
json error_body(int status, const std::string &message);

}  // namespace minfer::server
