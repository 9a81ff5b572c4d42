#include "chat/reasoning.hpp"

#include <algorithm>
#include <cstring>

namespace minfer::chat {
namespace {

constexpr const char *kOpen = "<think>", *kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The length of text's longest tail that is a proper beginning of `tag`.
size_t partial_tail(const std::string &text, size_t from, const char *tag) {
  const size_t n = std::strlen(tag);
  for (size_t k = std::min(n - 1, text.size() - from); k > 0; --k)
    if (text.compare(text.size() - k, k, tag, k) == 0) return k;
  return 0;
}

}  // namespace

bool template_thinks(const std::string &src) { return src.find(kOpen) != std::string::npos; }

bool in_answer(const std::string &reply, size_t at, bool opened_in_prompt) {
  const std::string before = reply.substr(0, std::min(at, reply.size()));
  if (before.find(kClose) != std::string::npos) return true;  // the block closed before it
  if (opened_in_prompt) return false;
  size_t k = 0;
  while (k < before.size() && is_space(before[k])) ++k;
  return before.compare(k, std::strlen(kOpen), kOpen) != 0;  // no block opened
}

bool prompt_opens_thinking(const std::string &prompt) {
  size_t end = prompt.size();
  while (end > 0 && is_space(prompt[end - 1])) --end;
  const size_t n = std::strlen(kOpen);
  return end >= n && prompt.compare(end - n, n, kOpen) == 0;
}

ReasoningSplitter::Pieces ReasoningSplitter::advance(const std::string &text, bool final) {
  Pieces out;
  for (;;) {
    switch (state_) {
      case State::start: {  // the reply may open with <think> (after whitespace)
        size_t at = pos_;
        while (at < text.size() && is_space(text[at])) ++at;
        const size_t n = std::min(text.size() - at, std::strlen(kOpen));
        if (text.compare(at, n, kOpen, n) != 0) {
          state_ = State::answering;  // no think block: all of it is the answer
          continue;
        }
        if (n < std::strlen(kOpen)) {
          if (!final) return out;  // "<thi" so far: wait
          state_ = State::answering;
          continue;
        }
        pos_ = at + n;
        state_ = State::thinking;
        continue;
      }
      case State::thinking: {
        const size_t close = text.find(kClose, pos_);
        if (close == std::string::npos) {
          const size_t end = final ? text.size() : text.size() - partial_tail(text, pos_, kClose);
          out.reasoning += text.substr(pos_, end - pos_);
          pos_ = end;
          return out;
        }
        out.reasoning += text.substr(pos_, close - pos_);
        pos_ = close + std::strlen(kClose);
        state_ = State::answer_start;
        continue;
      }
      case State::answer_start:
        while (pos_ < text.size() && is_space(text[pos_])) ++pos_;
        if (pos_ == text.size() && !final) return out;
        state_ = State::answering;
        continue;
      case State::answering:
        out.content += text.substr(pos_);
        pos_ = text.size();
        return out;
    }
  }
}

ReasoningSplitter::Pieces split_reasoning(const std::string &text, bool opened_in_prompt) {
  ReasoningSplitter s(opened_in_prompt);
  ReasoningSplitter::Pieces p = s.advance(text, /*final=*/true);
  size_t a = 0, b = p.reasoning.size();
  while (a < b && is_space(p.reasoning[a])) ++a;
  while (b > a && is_space(p.reasoning[b - 1])) --b;
  p.reasoning = p.reasoning.substr(a, b - a);
  return p;
}

}  // namespace minfer::chat
