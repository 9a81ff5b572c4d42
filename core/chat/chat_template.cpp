#include "chat/chat_template.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace minfer::chat {
namespace {

std::string where(const std::string &origin, const jinja::TemplateError &e) {
  std::string s = origin + ": chat template";
  if (e.line() > 0) s += ", line " + std::to_string(e.line()) + " col " + std::to_string(e.col());
  return s + ": " + e.message();
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string &source, std::string origin, std::string bos_token, std::string eos_token)
    : source_(source), origin_(std::move(origin)), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  try {
    tmpl_ = std::make_shared<const jinja::Template>(source);
  } catch (const jinja::TemplateError &e) {
    throw Error(where(origin_, e));
  }
}

ChatTemplate ChatTemplate::for_model(const gguf::File &f, const tokenizer::Tokenizer &tok, const std::string &override_template) {
  const std::string bos = tok.bos() >= 0 ? tok.token_text(tok.bos()) : "";
  const std::string eos = tok.eos() >= 0 ? tok.token_text(tok.eos()) : "";
  if (!override_template.empty()) {
    // A path when a file of that name exists (or it ends in .jinja); else the template text.
    std::error_code ec;
    const bool looks_like_path = override_template.find("{%") == std::string::npos && override_template.find("{{") == std::string::npos;
    if (looks_like_path) {
      if (!std::filesystem::is_regular_file(override_template, ec))
        throw Error(override_template + ": chat_template names no readable file (give a .jinja file or the template text itself)");
      std::ifstream in(override_template, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      return ChatTemplate(ss.str(), override_template, bos, eos);
    }
    return ChatTemplate(override_template, "chat_template (inline)", bos, eos);
  }
  const gguf::Value *v = f.find("tokenizer.chat_template");
  if (!v || v->type != gguf::ValueType::STRING || std::get<std::string>(v->v).empty())
    throw Error(f.path() + ": the model has no chat template (tokenizer.chat_template); give one with 'chat_template: FILE.jinja' "
                           "in the run config, or set 'chat: false' and write the prompt in full");
  return ChatTemplate(std::get<std::string>(v->v), f.path(), bos, eos);
}

std::string ChatTemplate::render(const jinja::Value &messages, bool add_generation_prompt, const jinja::Dict &extra,
                                 const jinja::RenderOptions &opts) const {
  jinja::Dict vars = {{"messages", messages},
                      {"add_generation_prompt", jinja::Value(add_generation_prompt)},
                      {"bos_token", jinja::Value(bos_)},
                      {"eos_token", jinja::Value(eos_)},
                      {"tools", jinja::Value::none()}};
  for (const auto &[k, v] : extra) {
    bool replaced = false;
    for (auto &[vk, vv] : vars)
      if (vk == k) vv = v, replaced = true;
    if (!replaced) vars.emplace_back(k, v);
  }
  try {
    return tmpl_->render(vars, opts);
  } catch (const jinja::TemplateError &e) {
    throw Error(where(origin_, e));
  }
}

std::string ChatTemplate::render(const std::vector<Message> &messages, bool add_generation_prompt, const jinja::RenderOptions &opts) const {
  return render(to_value(messages), add_generation_prompt, {}, opts);
}

std::vector<int32_t> tokenize_prompt(const tokenizer::Tokenizer &tok, const std::string &text) {
  std::vector<int32_t> ids;
  const bool want_bos = tok.add_bos() && tok.bos() >= 0;
  const std::string &bos = want_bos ? tok.token_text(tok.bos()) : std::string();
  if (want_bos && !(text.size() >= bos.size() && text.compare(0, bos.size(), bos) == 0)) ids.push_back(tok.bos());
  const std::vector<int32_t> body = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

namespace {

// Objects keep their keys' order with ordered_json (a request's tool schemas render through
// tojson as the client wrote them, as Python's dicts do); nlohmann::json sorts them.
template <class Json>
jinja::Value value_of(const Json &j) {
  switch (j.type()) {
    case Json::value_t::null: return jinja::Value::none();
    case Json::value_t::boolean: return jinja::Value(j.template get<bool>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return jinja::Value(j.template get<int64_t>());
    case Json::value_t::number_float: return jinja::Value(j.template get<double>());
    case Json::value_t::string: return jinja::Value(j.template get<std::string>());
    case Json::value_t::array: {
      jinja::List l;
      for (const auto &x : j) l.push_back(value_of(x));
      return jinja::Value(std::move(l));
    }
    case Json::value_t::object: {
      jinja::Dict d;
      for (const auto &[k, x] : j.items()) d.emplace_back(k, value_of(x));
      return jinja::Value(std::move(d));
    }
    default: return jinja::Value::none();
  }
}

}  // namespace

jinja::Value from_json(const nlohmann::json &j) { return value_of(j); }
jinja::Value from_json(const nlohmann::ordered_json &j) { return value_of(j); }

jinja::Value to_value(const std::vector<Message> &messages) {
  jinja::List l;
  for (const auto &m : messages) l.emplace_back(jinja::Dict{{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}});
  return jinja::Value(std::move(l));
}

}  // namespace minfer::chat
