// apps/minfer-server/native.hpp — llama-server's own API beside OpenAI's: POST /completion and
// POST /infill (fill-in-the-middle, what editor plugins such as llama.vim and llama.vscode
// call), and OpenAI completions' `suffix`. Their request fields map onto the OpenAI ones so one
// parser (openai.hpp) checks them; their replies keep llama-server's shape (`content`, `stop`,
// `stop_type`, `tokens_predicted`, `timings`, ...).
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "openai.hpp"
#include "tokenizer/tokenizer.hpp"

namespace minfer::server {

// A /completion or /infill body as the OpenAI completions fields parse_generation() reads:
// n_predict -> max_tokens (-1 or absent: no limit; 0: the prompt only, `prompt_only`),
// json_schema -> response_format, logit_bias's [[id, bias | false], ...] form -> an object.
// Fields of llama-server that change nothing here (cache_prompt: prompts are always reused;
// id_slot, samplers, n_keep, t_max_prompt_ms, t_max_predict_ms, n_indent) are dropped; ones
// this server cannot honour (grammar, post_sampling_probs, mirostat, ...) are refused, naming
// them. n_probs N > 0 -> logprobs N (the reply then gives completion_probabilities).
struct NativeRequest {
  json openai;
  bool prompt_only = false;
};
NativeRequest native_to_openai(const json &body);

// What an /infill request fills: code before and after the cursor, text that goes on the
// prefix (the current line's start, say), and other files as context (`input_extra`:
// [{filename, text}]).
struct InfillInput {
  std::string prefix, suffix, prompt;
  std::vector<std::pair<std::string, std::string>> extra;  // (file name, text)
};
InfillInput parse_infill(const json &body);  // throws BadRequest

// The prompt tokens: [BOS] extra <fim_pre> prefix prompt <fim_suf> suffix <fim_mid>, llama-
// server's layout. With repository tokens (Qwen2.5-Coder) the extra files are written
// <|repo_name|>myproject\n <|file_sep|>NAME\nTEXT ... <|file_sep|>filename\n; otherwise
// separated by "\n\n--- snippet ---\n\n". Fitted to the context less `reserve` tokens for the
// reply: prefix and suffix share up to 2,048 tokens 3:1 (the prefix's end and the suffix's
// start kept), the extra files' ends fill what is left. Throws BadRequest naming the missing
// tokens when the model has no FIM tokens.
std::vector<int32_t> infill_prompt(const tokenizer::Tokenizer &tok, const InfillInput &in, int64_t n_ctx, int64_t reserve);

// llama-server's completion_probabilities for generated tokens: [{id, token, bytes, logprob,
// top_logprobs: [{id, token, bytes, logprob}]}], the model's log-probabilities (before
// sampling), the n_probs likeliest as alternatives.
json completion_probabilities(std::span<const sampling::TokenLogprobs> lp, const TokenBytes &bytes);

// llama-server's stop_type: "eos" (the model ended), "word" (a stop string), "limit"
// (n_predict or the context), "none" (cancelled).
std::string stop_type(const std::string &finish, bool by_stop_string);

}  // namespace minfer::server
