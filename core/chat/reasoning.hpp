// core/chat/reasoning.hpp — a thinking model's reply split into its reasoning and its answer.
//
// Qwen 3, DeepSeek R1 and the models trained like them write <think>...</think> before the
// answer; some templates open the block in the prompt (DeepSeek R1's generation prompt ends in
// "<think>\n"), so the reply starts inside it. OpenAI-style servers (llama-server's
// --reasoning-format deepseek, vLLM's reasoning parsers) return the block's text as
// message.reasoning_content and only the rest as content; chat UIs show them apart.
#pragma once

#include <cstddef>
#include <string>

namespace minfer::chat {

// Whether a template's replies may open with a think block (its text writes "<think>").
bool template_thinks(const std::string &template_source);

// Whether a rendered prompt leaves the reply inside an open think block.
bool prompt_opens_thinking(const std::string &prompt);

// Fed the reply's text as it grows (each call the whole text so far, which only grows),
// hands out the reasoning and the answer that became final. A tail that may still turn into
// <think> or </think> waits for the next call, or for `final`. Whitespace between the block
// and the answer is dropped.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool opened_in_prompt) : state_(opened_in_prompt ? State::thinking : State::start) {}
  struct Pieces {
    std::string reasoning, content;
  };
  Pieces advance(const std::string &text, bool final);

 private:
  enum class State { start, thinking, answer_start, answering };
  State state_;
  size_t pos_ = 0;  // bytes of text handed out (or skipped)
};

// Whether position `at` of a reply lies in its answer, not in a think block (a tool call
// written while thinking is no call).
bool in_answer(const std::string &reply, size_t at, bool opened_in_prompt);

// A whole reply: {reasoning trimmed of surrounding whitespace, content}.
ReasoningSplitter::Pieces split_reasoning(const std::string &text, bool opened_in_prompt);

}  // namespace minfer::chat
