// core/chat/jinja/template.hpp — the Jinja subset chat templates are written in: parse once,
// render many times. Behaves as Python's jinja2 does in the sandbox Hugging Face transformers
// sets up for apply_chat_template (trim_blocks and lstrip_blocks on, loop controls, no
// autoescape, one trailing newline of the source dropped); docs/CHAT.md lists what it covers.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "chat/jinja/value.hpp"

namespace minfer::jinja {

struct Stmt;

// A template that fails to parse or to render. line/col are 1-based (0: no place);
// raised: the template's own raise_exception(message).
class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string &message, int line = 0, int col = 0, bool raised = false);
  const std::string &message() const { return message_; }
  int line() const { return line_; }
  int col() const { return col_; }
  bool raised() const { return raised_; }

 private:
  std::string message_;
  int line_, col_;
  bool raised_;
};

struct RenderOptions {
  // What a template may spend: evaluation steps (a loop that never ends), output bytes (a
  // string that doubles itself), nested macro calls.
  uint64_t max_steps = 10'000'000;
  size_t max_output = 16u << 20;
  int max_depth = 256;
  // What strftime_now() sees; unset: the local time now.
  std::optional<std::tm> now;
};

class Template {
 public:
  // Throws TemplateError with the line and column of the first syntax error.
  explicit Template(const std::string &source);
  ~Template();
  Template(const Template &) = delete;
  Template &operator=(const Template &) = delete;

  // vars: the template's variables (messages, add_generation_prompt, bos_token, ...).
  std::string render(const Dict &vars, const RenderOptions &opts = {}) const;

 private:
  std::vector<std::unique_ptr<Stmt>> body_;
};

}  // namespace minfer::jinja
