// core/chat/chat_template.hpp — a model's chat template: messages to the prompt text the model
// was trained on, and that text to tokens (special tokens parsed, BOS once).
//
// The template is the model's tokenizer.chat_template (a Jinja string), or one the run
// config names; it renders with the model's own BOS/EOS texts, as transformers'
// apply_chat_template does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "chat/jinja/template.hpp"

namespace minfer::gguf {
class File;
}
namespace minfer::tokenizer {
class Tokenizer;
}

namespace minfer::chat {

struct Message {
  std::string role, content;
};

class ChatTemplate {
 public:
  // origin names the template in errors ("MODEL.gguf", "FILE.jinja"). Throws minfer::Error
  // "ORIGIN: chat template, line L col C: what" when it does not parse.
  ChatTemplate(const std::string &source, std::string origin, std::string bos_token, std::string eos_token);

  // The model's own template (tokenizer.chat_template) with its BOS/EOS texts; `override`,
  // when not empty, is a .jinja file path or the template text itself (run config's
  // chat_template). Throws minfer::Error naming `chat_template:` when the model has none.
  static ChatTemplate for_model(const gguf::File &f, const tokenizer::Tokenizer &tok, const std::string &override_template = "");

  // messages: a list of {role, content, ...} dicts. extra: more template variables (tools,
  // enable_thinking, ...). A template error or raise_exception becomes minfer::Error
  // "ORIGIN: chat template, line L col C: message".
  std::string render(const jinja::Value &messages, bool add_generation_prompt, const jinja::Dict &extra = {},
                     const jinja::RenderOptions &opts = {}) const;
  std::string render(const std::vector<Message> &messages, bool add_generation_prompt, const jinja::RenderOptions &opts = {}) const;

  const std::string &origin() const { return origin_; }
  const std::string &source() const { return source_; }  // the template's text

 private:
  std::shared_ptr<const jinja::Template> tmpl_;
  std::string source_, origin_, bos_, eos_;
};

// The prompt's tokens: special tokens in the text parsed, and BOS in front only when the
// vocabulary adds one and the rendered text does not start with it already (llama.cpp's rule:
// no double BOS from a template that writes it).
std::vector<int32_t> tokenize_prompt(const tokenizer::Tokenizer &tok, const std::string &text);

// JSON (a parsed messages file, a test vector) as template values.
jinja::Value from_json(const nlohmann::json &j);
jinja::Value from_json(const nlohmann::ordered_json &j);  // objects in their keys' order
jinja::Value to_value(const std::vector<Message> &messages);

}  // namespace minfer::chat
