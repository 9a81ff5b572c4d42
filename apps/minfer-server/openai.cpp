#include "openai.hpp"

#include "common/error.hpp"
#include "common/json.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>

namespace minfer::server {
namespace {

// body[key] as a finite number within [lo, hi], or `dflt` when absent or null.
double number(const json &body, const char *key, double dflt, double lo, double hi) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return dflt;
  if (!it->is_number()) throw BadRequest(std::string("'") + key + "' must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    throw BadRequest(std::string("'") + key + "' must be from " + json(lo).dump() + " to " + json(hi).dump() + ", not " + it->dump());
  return v;
}

int64_t integer(const json &body, const char *key, int64_t dflt, int64_t lo, int64_t hi) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return dflt;
  if (!it->is_number_integer()) throw BadRequest(std::string("'") + key + "' must be an integer");
  const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : it->get<int64_t>();
  if (v < lo || v > hi) throw BadRequest(std::string("'") + key + "' must be from " + std::to_string(lo) + " to " + std::to_string(hi) + ", not " + it->dump());
  return v;
}

bool boolean(const json &body, const char *key, bool dflt) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) throw BadRequest(std::string("'") + key + "' must be true or false");
  return it->get<bool>();
}

// response_format: {"type": "text"}, {"type": "json_object"} (any object; llama-server's
// {"type": "json_object", "schema": S} too), {"type": "json_schema", "json_schema": {name,
// schema, strict}} (no schema: any JSON value). Keywords the decoder cannot enforce are refused.
std::shared_ptr<const sampling::Schema> response_schema(const json &rf) {
  const std::string type = rf.is_object() && rf.contains("type") && rf["type"].is_string() ? rf["type"].get<std::string>() : "";
  const json *schema = nullptr;
  if (type == "json_schema") {
    const auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object())
      throw BadRequest("'response_format' of type json_schema needs 'json_schema': {\"name\": N, \"schema\": {...}}");
    if (js->contains("schema")) schema = &(*js)["schema"];
  } else if (type == "json_object") {
    if (!rf.contains("schema")) return sampling::Schema::any_object();
    schema = &rf["schema"];
  } else if (type == "text") {
    return nullptr;
  } else {
    throw BadRequest("'response_format' " + rf.dump() + " is not supported: give {\"type\": \"json_schema\", \"json_schema\": {\"name\": N, \"schema\": S}}, "
                     "{\"type\": \"json_object\"} (any JSON object) or {\"type\": \"text\"}");
  }
  if (!schema) return sampling::Schema::any_value();
  try {
    return sampling::Schema::compile(*schema, /*strict=*/true);
  } catch (const std::exception &e) {
    throw BadRequest(std::string("'response_format': ") + e.what());
  }
}

}  // namespace

json parse_body(const std::string &text) {
  if (const std::string why = minfer::json::parse_refusal(text); !why.empty()) throw BadRequest("the body " + why);
  try {
    return json::parse(text);
  } catch (const std::exception &e) {
    throw BadRequest(std::string("the body is not JSON: ") + e.what());
  }
}

GenerationParams parse_generation(const json &body, const sampling::Config &defaults, uint64_t seed, Api api) {
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
  GenerationParams p;
  p.sampling = defaults;
  // max_completion_tokens is the newer name; either may come, not both different.
  // 0: only with echo (the prompt scored, nothing generated), checked below.
  const int64_t a = integer(body, "max_tokens", -1, 0, INT64_MAX), b = integer(body, "max_completion_tokens", -1, 0, INT64_MAX);
  if (a > 0 && b > 0 && a != b) throw BadRequest("'max_tokens' and 'max_completion_tokens' differ; give one");
  p.max_tokens = b >= 0 ? b : a;
  p.sampling.temperature = float(number(body, "temperature", defaults.temperature, 0.0, 2.0));
  p.sampling.top_p = float(number(body, "top_p", defaults.top_p, 0.0, 1.0));
  if (p.sampling.top_p <= 0.0f) throw BadRequest("'top_p' must be above 0 (1 turns it off)");
  p.sampling.top_k = int32_t(integer(body, "top_k", defaults.top_k, 0, INT32_MAX));
  p.sampling.min_p = float(number(body, "min_p", defaults.min_p, 0.0, 1.0));
  p.sampling.repeat_penalty = float(number(body, "repeat_penalty", defaults.repeat_penalty, 0.0, 100.0));
  if (body.contains("repetition_penalty") && !body["repetition_penalty"].is_null()) {  // vLLM's name for it
    const float rp = float(number(body, "repetition_penalty", 1.0, 0.0, 100.0));
    if (body.contains("repeat_penalty") && !body["repeat_penalty"].is_null() && rp != p.sampling.repeat_penalty)
      throw BadRequest("'repeat_penalty' and 'repetition_penalty' differ; give one");
    p.sampling.repeat_penalty = rp;
  }
  if (p.sampling.repeat_penalty <= 0.0f) throw BadRequest("'repeat_penalty' must be above 0 (1 turns it off)");
  const auto s = body.find("seed");
  if (s != body.end() && !s->is_null()) {
    if (!s->is_number_integer()) throw BadRequest("'seed' must be an integer");
    p.sampling.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
  } else {
    p.sampling.seed = seed;
  }
  p.sampling.presence_penalty = float(number(body, "presence_penalty", defaults.presence_penalty, -2.0, 2.0));
  p.sampling.frequency_penalty = float(number(body, "frequency_penalty", defaults.frequency_penalty, -2.0, 2.0));
  if (const auto it = body.find("repeat_last_n"); it != body.end())
    p.sampling.repeat_last_n = int32_t(integer(body, "repeat_last_n", defaults.repeat_last_n, -1, INT32_MAX));
  p.n = integer(body, "n", 1, 1, 16);
  if (const auto lb = body.find("logit_bias"); lb != body.end() && !lb->is_null()) {
    if (!lb->is_object()) throw BadRequest("'logit_bias' must be an object of {\"TOKEN_ID\": bias from -100 to 100}");
    for (const auto &[key, bias] : lb->items()) {
      char *end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
        throw BadRequest("'logit_bias' key \"" + key + "\" is not a token id (give ids as strings, e.g. {\"1234\": -100})");
      if (!bias.is_number() || !std::isfinite(bias.get<double>()) || bias.get<double>() < -100 || bias.get<double>() > 100)
        throw BadRequest("'logit_bias' of token " + key + " must be a number from -100 to 100, not " + bias.dump());
      p.sampling.logit_bias.emplace_back(int32_t(id), float(bias.get<double>()));
    }
  }
  if (api == Api::chat) {
    const int64_t top = integer(body, "top_logprobs", -1, 0, 20);
    const bool want = boolean(body, "logprobs", false);
    if (top >= 0 && !want) throw BadRequest("'top_logprobs' needs 'logprobs': true");
    if (want) p.logprobs = int32_t(std::max<int64_t>(top, 0));
  } else {
    p.logprobs = int32_t(integer(body, "logprobs", -1, 0, 20));  // the legacy API's count of alternatives
    p.echo = boolean(body, "echo", false);
    if (integer(body, "best_of", 1, 1, 16) > 1) throw BadRequest("'best_of' above 1 is not supported: 'n' gives several choices to pick from");
  }
  // llama.cpp's other samplers (llama-server takes them on every route).
  p.sampling.typical_p = float(number(body, "typical_p", defaults.typical_p, 0.0, 1.0));
  p.sampling.top_n_sigma = float(number(body, "top_n_sigma", defaults.top_n_sigma, -1.0, 100.0));
  p.sampling.xtc_probability = float(number(body, "xtc_probability", defaults.xtc_probability, 0.0, 1.0));
  p.sampling.xtc_threshold = float(number(body, "xtc_threshold", defaults.xtc_threshold, 0.0, 1.0));
  p.sampling.dry_multiplier = float(number(body, "dry_multiplier", defaults.dry_multiplier, 0.0, 100.0));
  p.sampling.dry_base = float(number(body, "dry_base", defaults.dry_base, 1.0, 100.0));
  p.sampling.dry_allowed_length = int32_t(integer(body, "dry_allowed_length", defaults.dry_allowed_length, 0, 1 << 20));
  p.sampling.dry_penalty_last_n = int32_t(integer(body, "dry_penalty_last_n", defaults.dry_penalty_last_n, -1, INT32_MAX));
  if (const auto br = body.find("dry_sequence_breakers"); br != body.end() && !br->is_null()) {
    if (!br->is_array() || br->size() > 64 || !std::all_of(br->begin(), br->end(), [](const json &x) { return x.is_string() && !x.get<std::string>().empty(); }))
      throw BadRequest("'dry_sequence_breakers' must be an array of at most 64 non-empty strings");
    p.dry_breakers.clear();
    for (const json &x : *br) p.dry_breakers.push_back(x.get<std::string>());
  }
  p.sampling.mirostat = int32_t(integer(body, "mirostat", defaults.mirostat, 0, 2));
  if (p.sampling.mirostat == 1) throw BadRequest("'mirostat' 1 (the first version) is not supported: give 2 (Mirostat 2.0)");
  p.sampling.mirostat_tau = float(number(body, "mirostat_tau", defaults.mirostat_tau, 0.0, 100.0));
  p.sampling.mirostat_eta = float(number(body, "mirostat_eta", defaults.mirostat_eta, 0.0, 1.0));
  p.ignore_eos = boolean(body, "ignore_eos", false);
  p.min_tokens = integer(body, "min_tokens", 0, 0, INT64_MAX);
  if (const auto ids = body.find("stop_token_ids"); ids != body.end() && !ids->is_null()) {
    if (!ids->is_array() || ids->size() > 64 || !std::all_of(ids->begin(), ids->end(), [](const json &x) {
          return x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() <= INT32_MAX;
        }))
      throw BadRequest("'stop_token_ids' must be an array of at most 64 token ids");
    for (const json &x : *ids) p.stop_token_ids.push_back(int32_t(x.get<int64_t>()));
  }
  if (p.max_tokens >= 0 && p.min_tokens > p.max_tokens)
    throw BadRequest("'min_tokens' (" + std::to_string(p.min_tokens) + ") is above 'max_tokens' (" + std::to_string(p.max_tokens) + ")");
  if (p.max_tokens == 0 && !p.echo)
    throw BadRequest("'max_tokens' must be at least 1 (0 only with 'echo': the prompt scored, nothing generated)");
  if (const auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) p.response_schema = response_schema(*rf);
  if (const auto g = body.find("grammar"); g != body.end() && !g->is_null() && !(g->is_string() && g->get<std::string>().empty())) {
    if (!g->is_string()) throw BadRequest("'grammar' must be a GBNF grammar as text");
    if (p.response_schema) throw BadRequest("'grammar' and 'response_format' (or 'json_schema') both constrain the reply; give one");
    try {
      p.grammar = sampling::Grammar::compile(g->get<std::string>());
    } catch (const minfer::Error &e) {
      std::string why = e.what();
      if (why.rfind("grammar: ", 0) == 0) why.erase(0, 9);
      throw BadRequest("'grammar': " + why);
    }
  }
  if (const auto st = body.find("stop"); st != body.end() && !st->is_null()) {
    if (st->is_string()) p.stop.push_back(st->get<std::string>());
    else if (st->is_array() && st->size() <= 16 && std::all_of(st->begin(), st->end(), [](const json &x) { return x.is_string(); }))
      for (const json &x : *st) p.stop.push_back(x.get<std::string>());
    else throw BadRequest("'stop' must be a string or an array of at most 16 strings");
    std::erase_if(p.stop, [](const std::string &x) { return x.empty(); });
  }
  p.stream = boolean(body, "stream", false);
  if (p.stream && p.echo && (p.logprobs >= 0 || p.max_tokens == 0))
    throw BadRequest("'echo' with 'logprobs' or 'max_tokens' 0 (scoring the prompt) is not streamed: ask without 'stream'");
  if (const auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) throw BadRequest("'stream_options' must be an object");
    p.include_usage = boolean(*so, "include_usage", false);
  }
  return p;
}

json chat_messages(const json &body) {
  const auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) throw BadRequest("'messages' must be a non-empty array of {role, content}");
  json out = json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json &m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw BadRequest(where + " must be an object with a string 'role'");
    json msg = m;
    const json &c = m.contains("content") ? m["content"] : json();
    if (c.is_array()) {  // content parts: only text ones can be rendered
      std::string text;
      for (const json &part : c) {
        if (!part.is_object() || string_or(part, "type") != "text" || !part.contains("text") || !part["text"].is_string())
          throw BadRequest(where + ".content: only parts of type 'text' are supported");
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else if (!c.is_string() && !c.is_null()) {
      throw BadRequest(where + ".content must be a string or an array of text parts");
    } else if (c.is_null()) {
      msg["content"] = "";
    }
    if (const auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) throw BadRequest(where + ".tool_calls must be an array of {id, type: \"function\", function: {name, arguments}}");
      for (size_t k = 0; k < tc->size(); ++k) {
        json &call = msg["tool_calls"][k];
        const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object() || !call["function"].contains("name") ||
            !call["function"]["name"].is_string())
          throw BadRequest(cw + " must be {id, type: \"function\", function: {name, arguments}}");
        json &args = call["function"]["arguments"];
        if (args.is_string()) {
          if (const std::string why = minfer::json::parse_refusal(args.get<std::string>()); !why.empty())
            throw BadRequest(cw + ".function.arguments " + why);
          json parsed = json::parse(args.get<std::string>(), nullptr, /*allow_exceptions=*/false);
          if (!parsed.is_object()) throw BadRequest(cw + ".function.arguments must be a JSON object (as text)");
          args = std::move(parsed);
        } else if (args.is_null()) {
          args = json::object();
        } else if (!args.is_object()) {
          throw BadRequest(cw + ".function.arguments must be a JSON object (as text)");
        }
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

ToolsRequest parse_tools(const json &body) {
  ToolsRequest r;
  const auto it = body.find("tools");
  if (it == body.end() || it->is_null()) {
    if (const auto c = body.find("tool_choice"); c != body.end() && !c->is_null() && *c != "none" && *c != "auto")
      throw BadRequest("'tool_choice' " + c->dump() + " names tools but the request has no 'tools'");
    return r;
  }
  if (!it->is_array()) throw BadRequest("'tools' must be an array of {type: \"function\", function: {name, description, parameters}}");
  for (size_t i = 0; i < it->size(); ++i) {
    const json &t = (*it)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || string_or(t, "type") != "function" || !t.contains("function") || !t["function"].is_object())
      throw BadRequest(where + " must be {type: \"function\", function: {name, description, parameters}}");
    const json &f = t["function"];
    const std::string name = f.contains("name") && f["name"].is_string() ? f["name"].get<std::string>() : "";
    const bool name_ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
    });
    if (!name_ok) throw BadRequest(where + ".function.name must be 1 to 64 letters, digits, '_', '-' or '.'");
    if (f.contains("parameters") && !f["parameters"].is_object()) throw BadRequest(where + ".function.parameters must be a JSON Schema object");
    if (f.contains("description") && !f["description"].is_string()) throw BadRequest(where + ".function.description must be a string");
  }
  r.parallel = boolean(body, "parallel_tool_calls", true);
  const auto c = body.find("tool_choice");
  const std::string choice = c == body.end() || c->is_null() ? "auto" : c->is_string() ? c->get<std::string>() : "";
  r.tools = *it;
  if (c != body.end() && c->is_object()) {  // {"type": "function", "function": {"name": N}}: that one
    const json *f = c->contains("function") && (*c)["function"].is_object() ? &(*c)["function"] : nullptr;
    const std::string name = f && f->contains("name") && (*f)["name"].is_string() ? (*f)["name"].get<std::string>() : "";
    if (c->value("type", "") != "function" || name.empty()) throw BadRequest("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": N}}");
    if (std::none_of(it->begin(), it->end(), [&](const json &t) { return t["function"]["name"] == name; }))
      throw BadRequest("'tool_choice' names '" + name + "', which is not one of the request's 'tools'");
    r.forced = {name};
  } else if (choice == "required") {
    for (const json &t : *it) r.forced.push_back(t["function"]["name"].get<std::string>());
  } else if (choice != "auto" && choice != "none") {
    throw BadRequest("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": N}}");
  }
  r.offered = choice != "none" && !it->empty();
  if (!r.offered) r.forced.clear();
  return r;
}

bool reasoning_effort_known(const json &effort) {
  static const char *const kEfforts[] = {"none", "minimal", "low", "medium", "high"};
  return effort.is_string() && std::any_of(std::begin(kEfforts), std::end(kEfforts), [&](const char *k) { return effort == k; });
}

json template_kwargs(const json &body) {
  json kwargs = json::object();
  if (const auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw BadRequest("'chat_template_kwargs' must be an object of template variables, e.g. {\"enable_thinking\": false}");
    for (const char *own : {"messages", "add_generation_prompt", "bos_token", "eos_token", "tools"})
      if (it->contains(own))
        throw BadRequest(std::string("'chat_template_kwargs' cannot set '") + own + "': " +
                         (std::string(own) == "tools" ? "give the request's 'tools'" : "the server sets it"));
    kwargs = *it;
  }
  // OpenAI's reasoning_effort: the effort to the templates that read it (gpt-oss), whether to
  // think to those that switch (Qwen 3, DeepSeek R1's distills): "none" and "minimal" think
  // not. chat_template_kwargs, where it sets them, wins.
  if (const auto e = body.find("reasoning_effort"); e != body.end() && !e->is_null()) {
    if (!reasoning_effort_known(*e))
      throw BadRequest("'reasoning_effort' must be \"none\", \"minimal\", \"low\", \"medium\" or \"high\", not " + e->dump());
    if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = *e;
    if (!kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = *e != "none" && *e != "minimal";
  }
  return kwargs;
}

bool reasoning_split(const json &body) {
  const auto it = body.find("reasoning_format");
  if (it == body.end() || it->is_null()) return true;
  if (*it == "auto" || *it == "deepseek") return true;
  if (*it == "none") return false;
  throw BadRequest("'reasoning_format' must be \"auto\", \"deepseek\" or \"none\", not " + it->dump());
}

std::string tool_call_id(int64_t request_id, size_t n) { return "call_" + std::to_string(request_id) + "_" + std::to_string(n); }

json tool_calls_json(const std::vector<chat::ToolCall> &calls, int64_t request_id, bool streaming, size_t first) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c;
    if (streaming) c["index"] = first + i;
    c["id"] = tool_call_id(request_id, first + i);
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

// One prompt: a string or an array of token ids (an empty array counts as ids).
std::optional<PromptField> one_prompt(const json &x) {
  PromptField p;
  if (x.is_string()) {
    p.text = x.get<std::string>();
    return p;
  }
  if (!x.is_array() || !std::all_of(x.begin(), x.end(), [](const json &v) { return v.is_number_integer(); })) return std::nullopt;
  p.is_ids = true;
  for (const json &v : x) {
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id > INT32_MAX) throw BadRequest("'prompt' token id " + v.dump() + " is not a token");
    p.ids.push_back(int32_t(id));
  }
  return p;
}

}  // namespace

std::vector<PromptField> completion_prompts(const json &body) {
  const auto it = body.find("prompt");
  if (it == body.end()) throw BadRequest("'prompt' is missing: give a string or an array of token ids");
  if (std::optional<PromptField> p = one_prompt(*it)) return {std::move(*p)};
  // A batch: ["text", ...] or [[ids], ...] (or a mix).
  std::vector<PromptField> all;
  if (it->is_array() && !it->empty() && it->size() <= kMaxPrompts)
    for (const json &x : *it) {
      std::optional<PromptField> p = x.is_array() || x.is_string() ? one_prompt(x) : std::nullopt;
      if (!p) break;
      all.push_back(std::move(*p));
    }
  if (it->is_array() && !it->empty() && all.size() == it->size()) return all;
  throw BadRequest("'prompt' must be a string, an array of token ids, or an array of up to " + std::to_string(kMaxPrompts) + " of those");
}

PromptField completion_prompt(const json &body) {
  std::vector<PromptField> all = completion_prompts(body);
  if (all.size() != 1) throw BadRequest("'prompt' must be one prompt here: a string or an array of token ids");
  return std::move(all[0]);
}

EmbeddingRequest parse_embeddings(const json &body) {
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
  EmbeddingRequest r;
  const auto in = body.find("input");
  if (in == body.end() || in->is_null()) throw BadRequest("'input' is missing: give a string, an array of strings or token ids");
  auto ids = [](const json &a) {
    PromptField p;
    p.is_ids = true;
    for (const json &x : a) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX) throw BadRequest("'input' token id " + x.dump() + " is not a token");
      p.ids.push_back(int32_t(x.get<int64_t>()));
    }
    return p;
  };
  if (in->is_string()) {
    r.inputs.push_back({in->get<std::string>(), {}, false});
  } else if (in->is_array() && !in->empty() && std::all_of(in->begin(), in->end(), [](const json &x) { return x.is_number_integer(); })) {
    r.inputs.push_back(ids(*in));
  } else if (in->is_array() && !in->empty()) {
    for (const json &x : *in) {
      if (x.is_string()) r.inputs.push_back({x.get<std::string>(), {}, false});
      else if (x.is_array() && !x.empty()) r.inputs.push_back(ids(x));
      else throw BadRequest("'input' must be a string, an array of strings, an array of token ids or an array of those");
    }
  } else {
    throw BadRequest("'input' must be a string, an array of strings, an array of token ids or an array of those (none empty)");
  }
  if (r.inputs.size() > 2048) throw BadRequest("'input' has " + std::to_string(r.inputs.size()) + " items; at most 2048");
  for (size_t i = 0; i < r.inputs.size(); ++i)
    if (!r.inputs[i].is_ids && r.inputs[i].text.empty()) throw BadRequest("'input' item " + std::to_string(i) + " is empty");
  const auto fmt = body.find("encoding_format");
  const std::string f = fmt == body.end() || fmt->is_null() ? "float" : fmt->is_string() ? fmt->get<std::string>() : "";
  if (f != "float" && f != "base64") throw BadRequest("'encoding_format' must be \"float\" or \"base64\"");
  r.base64 = f == "base64";
  r.dimensions = integer(body, "dimensions", 0, 1, INT32_MAX);
  return r;
}

std::vector<float> unit_embedding(const std::vector<float> &v, int64_t dims) {
  std::vector<float> out(v.begin(), v.begin() + (dims > 0 ? std::min<int64_t>(dims, int64_t(v.size())) : int64_t(v.size())));
  double sum = 0;
  for (const float x : out) sum += double(x) * x;
  const double norm = std::sqrt(sum);
  if (norm > 0)
    for (float &x : out) x = float(x / norm);
  return out;
}

json embedding_json(const std::vector<float> &v, bool base64) {
  if (!base64) return json(v);
  static const char *kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto *b = reinterpret_cast<const unsigned char *>(v.data());  // f32 little-endian: the host's order here
  const size_t n = v.size() * 4;
  std::string s;
  s.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t w = uint32_t(b[i]) << 16 | (i + 1 < n ? uint32_t(b[i + 1]) << 8 : 0) | (i + 2 < n ? uint32_t(b[i + 2]) : 0);
    s += kAlphabet[w >> 18 & 63];
    s += kAlphabet[w >> 12 & 63];
    s += i + 1 < n ? kAlphabet[w >> 6 & 63] : '=';
    s += i + 2 < n ? kAlphabet[w & 63] : '=';
  }
  return s;
}

StopCheck check_stops(std::string &text, const std::vector<std::string> &stops, size_t from) {
  size_t first = std::string::npos;
  std::string word;
  for (const std::string &s : stops)
    if (const size_t at = text.find(s, from); at < first) first = at, word = s;
  if (first != std::string::npos) {
    text.erase(first);
    return {text.size(), true, word};
  }
  // Hold back the longest end of the text that begins some stop string.
  size_t hold = 0;
  for (const std::string &s : stops)
    for (size_t n = std::min(s.size() - 1, text.size() - std::min(from, text.size())); n > hold; --n)
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  return {text.size() - hold, false};
}

json byte_list(const std::string &b) {
  json a = json::array();
  for (const unsigned char c : b) a.push_back(int(c));
  return a;
}

json chat_logprobs(const std::vector<sampling::TokenLogprobs> &lp, const TokenBytes &bytes) {
  json content = json::array();
  for (const sampling::TokenLogprobs &t : lp) {
    const std::string b = bytes(t.token);
    json top = json::array();
    for (const auto &[id, l] : t.top) {
      const std::string tb = bytes(id);
      top.push_back({{"token", tb}, {"logprob", l}, {"bytes", byte_list(tb)}});
    }
    content.push_back({{"token", b}, {"logprob", t.logprob}, {"bytes", byte_list(b)}, {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json completion_logprobs(const std::vector<sampling::TokenLogprobs> &lp, const TokenBytes &bytes, size_t offset) {
  json tokens = json::array(), logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const sampling::TokenLogprobs &t : lp) {
    const std::string b = bytes(t.token);
    tokens.push_back(b);
    logprobs.push_back(t.logprob);
    offsets.push_back(offset);
    offset += b.size();
    json alts = json::object();
    for (const auto &[id, l] : t.top) alts[bytes(id)] = l;
    top.push_back(std::move(alts));
  }
  return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(logprobs)}, {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)}};
}

json echo_logprobs(const std::vector<int32_t> &prompt, const std::vector<sampling::TokenLogprobs> &prompt_lp,
                   const std::vector<sampling::TokenLogprobs> &generated, const TokenBytes &bytes, size_t generated_offset) {
  json tokens = json::array(), logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string b = bytes(prompt[i]);
    tokens.push_back(b);
    offsets.push_back(offset);
    offset += b.size();
    if (i == 0 || i - 1 >= prompt_lp.size()) {  // the first token has nothing before it
      logprobs.push_back(nullptr), top.push_back(nullptr);
      continue;
    }
    const sampling::TokenLogprobs &t = prompt_lp[i - 1];
    logprobs.push_back(t.logprob);
    json alts = json::object();
    for (const auto &[id, l] : t.top) alts[bytes(id)] = l;
    top.push_back(std::move(alts));
  }
  const json g = completion_logprobs(generated, bytes, generated_offset);
  for (const json &v : g["tokens"]) tokens.push_back(v);
  for (const json &v : g["token_logprobs"]) logprobs.push_back(v);
  for (const json &v : g["top_logprobs"]) top.push_back(v);
  for (const json &v : g["text_offset"]) offsets.push_back(v);
  return {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(logprobs)}, {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)}};
}

json error_body(int status, const std::string &message) {
  const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error" : status >= 500 ? "server_error" : "invalid_request_error";
  if (status == 503) type = "unavailable_error";
  return {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
}

}  // namespace minfer::server
