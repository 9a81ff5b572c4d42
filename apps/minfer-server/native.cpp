#include "native.hpp"

#include <algorithm>

namespace minfer::server {

NativeRequest native_to_openai(const json &body) {
  if (!body.is_object()) throw BadRequest("the request body must be a JSON object");
  NativeRequest r;
  r.openai = json::object();
  for (const char *k : {"prompt", "temperature", "top_k", "top_p", "min_p", "seed", "stop", "stream", "repeat_penalty", "repeat_last_n",
                        "presence_penalty", "frequency_penalty", "response_format", "ignore_eos", "grammar", "typical_p", "top_n_sigma",
                        "xtc_probability", "xtc_threshold", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
                        "dry_sequence_breakers", "mirostat", "mirostat_tau", "mirostat_eta"})
    if (body.contains(k)) r.openai[k] = body[k];
  if (const auto s = body.find("seed"); s != body.end() && s->is_number_integer() && s->get<int64_t>() == -1)
    r.openai.erase("seed");  // llama-server's "random"
  if (const auto n = body.find("n_predict"); n != body.end() && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() < -1) throw BadRequest("'n_predict' must be -1 (no limit), 0 (the prompt only) or a count");
    const int64_t v = n->get<int64_t>();
    if (v == 0) r.prompt_only = true, r.openai["max_tokens"] = 1;  // the prompt is evaluated (and cached); the token is dropped
    else if (v > 0) r.openai["max_tokens"] = v;
  }
  if (const auto js = body.find("json_schema"); js != body.end() && !js->is_null())
    r.openai["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "json_schema"}, {"schema", *js}}}};
  if (const auto lb = body.find("logit_bias"); lb != body.end() && !lb->is_null()) {
    if (lb->is_object()) {
      r.openai["logit_bias"] = *lb;
    } else if (lb->is_array()) {
      json o = json::object();
      for (const json &pair : *lb) {
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !(pair[1].is_number() || pair[1] == false))
          throw BadRequest("'logit_bias' must be [[TOKEN_ID, bias or false], ...] or {\"TOKEN_ID\": bias}");
        o[std::to_string(pair[0].get<int64_t>())] = pair[1] == false ? json(-100) : pair[1];
      }
      r.openai["logit_bias"] = std::move(o);
    } else {
      throw BadRequest("'logit_bias' must be [[TOKEN_ID, bias or false], ...] or {\"TOKEN_ID\": bias}");
    }
  }
  if (const auto np = body.find("n_probs"); np != body.end() && !np->is_null()) {
    if (!np->is_number_integer() || np->get<int64_t>() < 0 || np->get<int64_t>() > 20) throw BadRequest("'n_probs' must be a count from 0 to 20");
    if (np->get<int64_t>() > 0) r.openai["logprobs"] = *np;
  }
  if (const auto ps = body.find("post_sampling_probs"); ps != body.end() && *ps == true)
    throw BadRequest("'post_sampling_probs' is not supported: 'n_probs' gives the model's log-probabilities before sampling");
  // Samplers this engine does not have, when turned on.
  const std::pair<const char *, double> off[] = {{"tfs_z", 1}, {"dynatemp_range", 0}};
  for (const auto &[k, neutral] : off)
    if (const auto it = body.find(k); it != body.end() && it->is_number() && it->get<double>() != neutral)
      throw BadRequest(std::string("'") + k + "' is not supported: this server samples with temperature, top_k, top_p, min_p, typical_p, "
                                               "top_n_sigma, XTC, DRY, mirostat 2 and penalties");
  return r;
}

InfillInput parse_infill(const json &body) {
  InfillInput in;
  auto text = [&](const char *k, std::string &out) {
    if (const auto it = body.find(k); it != body.end() && !it->is_null()) {
      if (!it->is_string()) throw BadRequest(std::string("'") + k + "' must be a string");
      out = it->get<std::string>();
    }
  };
  text("input_prefix", in.prefix);
  text("input_suffix", in.suffix);
  text("prompt", in.prompt);
  if (const auto ex = body.find("input_extra"); ex != body.end() && !ex->is_null()) {
    if (!ex->is_array()) throw BadRequest("'input_extra' must be an array of {\"filename\": F, \"text\": T}");
    for (const json &c : *ex) {
      if (!c.is_object() || (c.contains("text") && !c["text"].is_string()) || (c.contains("filename") && !c["filename"].is_string()))
        throw BadRequest("'input_extra' must be an array of {\"filename\": F, \"text\": T}");
      in.extra.emplace_back(c.value("filename", std::string("tmp")), c.value("text", std::string()));
    }
  }
  return in;
}

std::vector<int32_t> infill_prompt(const tokenizer::Tokenizer &tok, const InfillInput &in, int64_t n_ctx, int64_t reserve) {
  const tokenizer::FimTokens &fim = tok.fim();
  if (!fim.usable())
    throw BadRequest("this model has no fill-in-the-middle tokens (prefix, suffix and middle: <|fim_prefix|> and the like, or "
                     "tokenizer.ggml.fim_*_token_id): use a code model trained for infill");
  auto encode = [&](const std::string &s) { return tok.encode(s, /*add_special=*/false, /*parse_special=*/false); };
  std::vector<int32_t> extra;
  const bool repo = fim.rep >= 0 && fim.sep >= 0;
  if (repo) {
    extra.push_back(fim.rep);
    for (const int32_t t : encode("myproject\n")) extra.push_back(t);
  }
  for (const auto &[name, text] : in.extra) {
    if (repo) {
      extra.push_back(fim.sep);
      for (const int32_t t : encode(name + "\n")) extra.push_back(t);
    } else {
      for (const int32_t t : encode("\n\n--- snippet ---\n\n")) extra.push_back(t);
    }
    for (const int32_t t : encode(text)) extra.push_back(t);
  }
  if (repo) {
    extra.push_back(fim.sep);
    for (const int32_t t : encode("filename\n")) extra.push_back(t);
  }
  std::vector<int32_t> prefix = encode(in.prefix), suffix = encode(in.suffix);
  const std::vector<int32_t> prompt = encode(in.prompt);
  const bool bos = tok.add_bos() && tok.bos() >= 0;
  // The budget: the context less the reply's room; prefix and suffix share up to 2,048 of it.
  const int64_t budget = std::max<int64_t>(0, n_ctx - reserve - 3 - int64_t(bos) - int64_t(prompt.size()));
  const int64_t core = std::min<int64_t>(budget, 2048);
  const int64_t suffix_take = std::min<int64_t>(int64_t(suffix.size()), std::max<int64_t>(core / 4, core - int64_t(prefix.size())));
  const int64_t prefix_take = std::min<int64_t>(int64_t(prefix.size()), core - suffix_take);
  const int64_t extra_take = std::min<int64_t>(int64_t(extra.size()), budget - prefix_take - suffix_take);
  std::vector<int32_t> out;
  if (bos) out.push_back(tok.bos());
  out.insert(out.end(), extra.end() - extra_take, extra.end());
  out.push_back(fim.pre);
  out.insert(out.end(), prefix.end() - prefix_take, prefix.end());
  out.insert(out.end(), prompt.begin(), prompt.end());
  out.push_back(fim.suf);
  out.insert(out.end(), suffix.begin(), suffix.begin() + suffix_take);
  out.push_back(fim.mid);
  return out;
}

json completion_probabilities(std::span<const sampling::TokenLogprobs> lp, const TokenBytes &bytes) {
  const auto entry = [&](int32_t id, float logprob) {
    const std::string b = bytes(id);
    return json{{"id", id}, {"token", b}, {"bytes", byte_list(b)}, {"logprob", logprob}};
  };
  json out = json::array();
  for (const sampling::TokenLogprobs &t : lp) {
    json e = entry(t.token, t.logprob), top = json::array();
    for (const auto &[id, l] : t.top) top.push_back(entry(id, l));
    e["top_logprobs"] = std::move(top);
    out.push_back(std::move(e));
  }
  return out;
}

std::string stop_type(const std::string &finish, bool by_stop_string) {
  if (by_stop_string) return "word";
  if (finish == "length") return "limit";
  if (finish == "cancelled") return "none";
  return "eos";
}

}  // namespace minfer::server
