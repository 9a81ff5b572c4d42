#include "config/run_config.hpp"

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "common/error.hpp"
#include "sampling/gbnf.hpp"
#include "sampling/json_schema.hpp"

namespace minfer {
namespace {

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node &at, const std::string &what) const {
    const YAML::Mark m = at.Mark();
    std::string where = source_;
    if (!m.is_null()) where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    throw Error(where + ": " + what);
  }

  void expect_map(const YAML::Node &n, const std::string &what) const {
    if (!n.IsMap()) fail(n, what + " must be a mapping (key: value lines)");
  }

  std::string scalar(const YAML::Node &n, const std::string &key) const {
    if (!n.IsScalar()) fail(n, "'" + key + "' must be a single value");
    return n.Scalar();
  }

  template <class T>
  T as(const YAML::Node &n, const std::string &key, const std::string &expected) const {
    if (!n.IsScalar()) fail(n, "'" + key + "' must be " + expected);
    try {
      return n.as<T>();
    } catch (const YAML::Exception &) {
      fail(n, "'" + key + "' is '" + n.Scalar() + "'; expected " + expected);
    }
  }

  // Rejects keys of map n that are not in allowed.
  void only_keys(const YAML::Node &n, const std::set<std::string> &allowed,
                 const std::string &where) const {
    for (const auto &kv : n) {
      const std::string k = kv.first.Scalar();
      if (!allowed.count(k)) {
        std::string list;
        for (const auto &a : allowed) list += (list.empty() ? "" : ", ") + a;
        fail(kv.first, "unknown key '" + k + "' in " + where + " (expected one of: " + list + ")");
      }
    }
  }

 private:
  std::string source_;
};

// yaml-cpp keeps both entries of a key written twice and answers lookups with the first:
// the second would be ignored without a word, so it is an error, at the second's place.
void refuse_duplicate_keys(const Reader &r, const YAML::Node &n) {
  if (n.IsMap()) {
    std::set<std::string> seen;
    for (const auto &kv : n) {
      if (kv.first.IsScalar() && !seen.insert(kv.first.Scalar()).second)
        r.fail(kv.first, "key '" + kv.first.Scalar() + "' appears twice in this mapping; keep one");
      refuse_duplicate_keys(r, kv.second);
    }
  } else if (n.IsSequence()) {
    for (const auto &x : n) refuse_duplicate_keys(r, x);
  }
}

void read_backends(const Reader &r, const YAML::Node &n, RunConfig &cfg) {
  r.expect_map(n, "'backends'");
  for (const auto &kv : n) {
    BackendConfig b;
    b.name = kv.first.Scalar();
    if (!kv.first.IsScalar() || b.name.empty()) r.fail(kv.first, "a backend needs a name (cpu, cuda, or a plugin's name)");
    const YAML::Node &body = kv.second;
    if (body.IsNull()) {
      cfg.backends.push_back(b);
      continue;
    }
    r.expect_map(body, "backend '" + b.name + "'");
    for (const auto &opt : body) {
      const std::string key = opt.first.Scalar();
      if (key == "device") {
        b.device = r.as<int32_t>(opt.second, "device", "a device index (0, 1, ...)");
        if (b.device < 0) r.fail(opt.second, "'device' must be 0 or more");
      } else if (key == "plugin") {
        // A path (the plugin file) or a plugin's name: `gpu1: {plugin: cuda, device: 1}`.
        const std::string v = r.scalar(opt.second, key);
        const bool path = v.find('/') != std::string::npos || (v.size() > 3 && v.compare(v.size() - 3, 3, ".so") == 0);
        (path ? b.plugin_path : b.plugin) = v;
      } else {
        b.options.emplace_back(key, r.scalar(opt.second, key));
      }
    }
    cfg.backends.push_back(std::move(b));
  }
  if (cfg.backends.empty()) r.fail(n, "'backends' names no backend; add one, e.g. 'cpu: {}'");
}

void read_placement(const Reader &r, const YAML::Node &n, RunConfig &cfg) {
  r.expect_map(n, "'placement'");
  r.only_keys(n, {"default", "rules", "experts", "split", "devices"}, "'placement'");
  if (n["default"]) cfg.default_backend = r.scalar(n["default"], "default");
  if (n["split"]) {
    cfg.split = r.scalar(n["split"], "split");
    if (cfg.split != "layer" && cfg.split != "tensor")
      r.fail(n["split"], "unknown split '" + cfg.split + "'; expected 'layer' (layers divided among the devices) or 'tensor' "
                         "(each layer divided among them)");
    const YAML::Node devices = n["devices"];
    if (!devices || !devices.IsSequence() || devices.size() == 0)
      r.fail(devices ? devices : n["split"], "'split' needs 'devices: [NAME, ...]', the backends to divide the model among, in order");
    for (const auto &d : devices) {
      const std::string name = r.scalar(d, "devices");
      if (std::find(cfg.split_devices.begin(), cfg.split_devices.end(), name) != cfg.split_devices.end())
        r.fail(d, "backend '" + name + "' is listed twice in 'devices'");
      cfg.split_devices.push_back(name);
    }
    if (cfg.split == "tensor")
      for (const char *key : {"default", "rules", "experts"})
        if (n[key]) r.fail(n[key], std::string("'") + key + "' does not go with 'split: tensor', which places every node on its rank's device itself");
    if (!n["default"]) cfg.default_backend = cfg.split_devices.front();
  } else if (n["devices"]) {
    r.fail(n["devices"], "'devices' goes with 'split: layer' or 'split: tensor'");
  }
  // experts: NAME — a mixture-of-experts model's routed experts (their matmuls, activation and
  // weighted sum, and so their weights) on NAME, the rest where the other rules say
  // (llama.cpp's --override-tensor exps=CPU). First, so it wins over a broader rule.
  if (n["experts"]) cfg.rules.insert(cfg.rules.begin(), {std::string(kExpertNodes), r.scalar(n["experts"], "experts")});
  if (const YAML::Node rules = n["rules"]) {
    if (!rules.IsSequence()) r.fail(rules, "'rules' must be a list of {match: GLOB, backend: NAME}");
    for (const auto &rule : rules) {
      r.expect_map(rule, "a placement rule");
      r.only_keys(rule, {"match", "backend"}, "a placement rule");
      if (!rule["match"] || !rule["backend"])
        r.fail(rule, "a placement rule needs both 'match' and 'backend'");
      cfg.rules.push_back({r.scalar(rule["match"], "match"), r.scalar(rule["backend"], "backend")});
    }
  }
}

void read_demo(const Reader &r, const YAML::Node &n, DemoConfig &d) {
  r.expect_map(n, "'demo'");
  r.only_keys(n, {"tokens", "vocab", "dim", "table_type"}, "'demo'");
  if (n["vocab"]) d.vocab = r.as<int64_t>(n["vocab"], "vocab", "a positive integer");
  if (n["dim"]) d.dim = r.as<int64_t>(n["dim"], "dim", "a positive integer");
  if (n["table_type"]) d.table_type = r.scalar(n["table_type"], "table_type");
  if (d.vocab <= 0) r.fail(n["vocab"], "'vocab' must be positive");
  if (d.dim <= 0 || d.dim % 32 != 0) r.fail(n["dim"], "'dim' must be a positive multiple of 32");
  if (d.table_type != "f32" && d.table_type != "f16" && d.table_type != "q8_0")
    r.fail(n["table_type"], "'table_type' is '" + d.table_type + "'; expected f32, f16 or q8_0");
  if (const YAML::Node t = n["tokens"]) {
    if (!t.IsSequence() || t.size() == 0) r.fail(t, "'tokens' must be a non-empty list of row ids");
    d.tokens.clear();
    for (const auto &x : t) {
      const auto id = r.as<int32_t>(x, "tokens", "a row id");
      if (id < 0 || id >= d.vocab)
        r.fail(x, "token " + std::to_string(id) + " is outside the table's " +
                      std::to_string(d.vocab) + " rows");
      d.tokens.push_back(id);
    }
  }
}

void read_generation(const Reader &r, const YAML::Node &n, GenerationConfig &g) {
  r.expect_map(n, "'generation'");
  r.only_keys(n, {"n_predict", "temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "seed", "stop", "grammar",
                  "grammar_file", "json_schema", "presence_penalty", "frequency_penalty", "typical_p", "top_n_sigma", "xtc_probability",
                  "xtc_threshold", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "mirostat",
                  "mirostat_tau", "mirostat_eta"},
              "'generation'");
  for (const auto &[key, field] : std::initializer_list<std::pair<const char *, float *>>{
           {"presence_penalty", &g.presence_penalty}, {"frequency_penalty", &g.frequency_penalty}, {"typical_p", &g.typical_p},
           {"top_n_sigma", &g.top_n_sigma}, {"xtc_probability", &g.xtc_probability}, {"xtc_threshold", &g.xtc_threshold},
           {"dry_multiplier", &g.dry_multiplier}, {"dry_base", &g.dry_base}, {"mirostat_tau", &g.mirostat_tau}, {"mirostat_eta", &g.mirostat_eta}})
    if (n[key]) *field = r.as<float>(n[key], key, "a number");
  for (const auto &[key, field] : std::initializer_list<std::pair<const char *, int32_t *>>{
           {"dry_allowed_length", &g.dry_allowed_length}, {"dry_penalty_last_n", &g.dry_penalty_last_n}, {"mirostat", &g.mirostat}})
    if (n[key]) *field = r.as<int32_t>(n[key], key, "an integer");
  if (const YAML::Node b = n["dry_sequence_breakers"]) {
    if (!b.IsSequence()) r.fail(b, "'dry_sequence_breakers' must be a list of strings");
    g.dry_sequence_breakers.clear();
    for (const auto &x : b) g.dry_sequence_breakers.push_back(r.scalar(x, "dry_sequence_breakers"));
  }
  if (n["grammar"] && n["grammar_file"]) r.fail(n["grammar_file"], "give 'grammar' or 'grammar_file', not both");
  if (n["grammar"]) g.grammar = r.scalar(n["grammar"], "grammar");
  if (n["grammar_file"]) {
    const std::string path = r.scalar(n["grammar_file"], "grammar_file");
    std::ifstream in(path, std::ios::binary);
    if (!in) r.fail(n["grammar_file"], "'grammar_file' " + path + " cannot be read (paths are relative to the working directory)");
    g.grammar.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (n["json_schema"]) g.json_schema = r.scalar(n["json_schema"], "json_schema");
  if (n["n_predict"]) g.n_predict = r.as<int32_t>(n["n_predict"], "n_predict", "a token count");
  if (n["temperature"]) g.temperature = r.as<float>(n["temperature"], "temperature", "a number (0 = greedy)");
  if (n["top_k"]) g.top_k = r.as<int32_t>(n["top_k"], "top_k", "an integer (0 = off)");
  if (n["top_p"]) g.top_p = r.as<float>(n["top_p"], "top_p", "a number in (0, 1]");
  if (n["min_p"]) g.min_p = r.as<float>(n["min_p"], "min_p", "a number in [0, 1)");
  if (n["repeat_penalty"]) g.repeat_penalty = r.as<float>(n["repeat_penalty"], "repeat_penalty", "a number (1 = off)");
  if (n["repeat_last_n"]) g.repeat_last_n = r.as<int32_t>(n["repeat_last_n"], "repeat_last_n", "a token count");
  if (n["seed"]) g.seed = r.as<uint64_t>(n["seed"], "seed", "a non-negative integer");
  if (const YAML::Node st = n["stop"]) {
    if (st.IsScalar()) g.stop.push_back(st.Scalar());
    else if (st.IsSequence())
      for (const auto &x : st) g.stop.push_back(r.scalar(x, "stop"));
    else r.fail(st, "'stop' must be a string or a list of strings");
  }
  check_generation(g, [&](const std::string &key, const std::string &what) {
    r.fail(key == "grammar" && !n["grammar"] ? n["grammar_file"] : n[key], what);  // a grammar_file's errors at that key
  });
}

void read_server(const Reader &r, const YAML::Node &n, ServerConfig &s) {
  r.expect_map(n, "'server'");
  r.only_keys(n, {"host", "port", "api_key", "timeout", "alias", "embeddings", "cors_origins"}, "'server'");
  if (const YAML::Node co = n["cors_origins"]) {
    if (co.IsScalar()) s.cors_origins.push_back(co.Scalar());
    else if (co.IsSequence())
      for (const auto &x : co) s.cors_origins.push_back(r.scalar(x, "cors_origins"));
    else r.fail(co, "'cors_origins' must be an origin (\"http://localhost:3000\", \"*\" for any) or a list of them");
  }
  if (n["host"]) s.host = r.scalar(n["host"], "host");
  if (n["port"]) {
    s.port = r.as<int32_t>(n["port"], "port", "a port number");
    if (s.port < 0 || s.port > 65535) r.fail(n["port"], "'port' is " + std::to_string(s.port) + "; it must be 0 (any free port) to 65535");
  }
  if (n["api_key"]) s.api_key = r.scalar(n["api_key"], "api_key");
  if (n["timeout"]) {
    s.timeout = r.as<int32_t>(n["timeout"], "timeout", "seconds");
    if (s.timeout < 1) r.fail(n["timeout"], "'timeout' is " + std::to_string(s.timeout) + "; it must be at least 1 second");
  }
  if (n["alias"]) s.alias = r.scalar(n["alias"], "alias");
  if (n["embeddings"]) s.embeddings = r.as<bool>(n["embeddings"], "embeddings", "true or false");
}

void read_synthesize(const Reader &r, const YAML::Node &n, SynthesizeConfig &s) {
  r.expect_map(n, "'synthesize'");
  r.only_keys(n, {"arch", "preset", "type", "seed", "vocab"}, "'synthesize'");
  s.enabled = true;
  if (n["arch"]) s.arch = r.scalar(n["arch"], "arch");
  if (n["preset"]) s.preset = r.scalar(n["preset"], "preset");
  if (n["type"]) s.type = r.scalar(n["type"], "type");
  if (n["seed"]) s.seed = r.as<uint64_t>(n["seed"], "seed", "a non-negative integer");
  if (n["vocab"]) s.vocab = r.scalar(n["vocab"], "vocab");
}

}  // namespace

void check_generation(const GenerationConfig &g, const std::function<void(const std::string &key, const std::string &what)> &fail) {
  const auto finite = [](float x) { return std::isfinite(x); };
  const auto num = [](float x) {  // as the user wrote it: 0.5, not 0.500000
    char b[32];
    std::snprintf(b, sizeof b, "%g", double(x));
    return std::string(b);
  };
  if (g.n_predict < 0) fail("n_predict", "'n_predict' is " + std::to_string(g.n_predict) + "; it must be 0 or more");
  if (!finite(g.temperature) || g.temperature < 0)
    fail("temperature", "'temperature' is " + num(g.temperature) + "; it must be a finite number, 0 (greedy) or more");
  if (g.top_k < 0) fail("top_k", "'top_k' is " + std::to_string(g.top_k) + "; it must be 0 (off) or more");
  if (!(g.top_p > 0 && g.top_p <= 1)) fail("top_p", "'top_p' is " + num(g.top_p) + "; it must be in (0, 1]");
  if (!(g.min_p >= 0 && g.min_p < 1)) fail("min_p", "'min_p' is " + num(g.min_p) + "; it must be in [0, 1)");
  if (!finite(g.repeat_penalty) || !(g.repeat_penalty > 0))
    fail("repeat_penalty", "'repeat_penalty' is " + num(g.repeat_penalty) + "; it must be a positive number (1 = off)");
  if (g.repeat_last_n < -1)
    fail("repeat_last_n", "'repeat_last_n' is " + std::to_string(g.repeat_last_n) +
                              "; it must be a token count, 0 (off) or -1 (the whole sequence)");
  const auto in = [&](const char *key, float v, float lo, float hi, const char *what) {
    if (!finite(v) || v < lo || v > hi) fail(key, std::string("'") + key + "' is " + num(v) + "; it must be " + what);
  };
  in("presence_penalty", g.presence_penalty, -2, 2, "from -2 to 2");
  in("frequency_penalty", g.frequency_penalty, -2, 2, "from -2 to 2");
  in("typical_p", g.typical_p, 0, 1, "in [0, 1] (1 = off)");
  in("top_n_sigma", g.top_n_sigma, -1, 100, "-1 (off) or a positive number");
  in("xtc_probability", g.xtc_probability, 0, 1, "in [0, 1] (0 = off)");
  in("xtc_threshold", g.xtc_threshold, 0, 1, "in [0, 1]");
  in("dry_multiplier", g.dry_multiplier, 0, 100, "0 (off) or a positive number");
  in("dry_base", g.dry_base, 1, 100, "1 or more");
  in("mirostat_tau", g.mirostat_tau, 0, 100, "0 or more");
  in("mirostat_eta", g.mirostat_eta, 0, 1, "in [0, 1]");
  if (g.dry_allowed_length < 0) fail("dry_allowed_length", "'dry_allowed_length' must be 0 or more");
  if (g.dry_penalty_last_n < -1) fail("dry_penalty_last_n", "'dry_penalty_last_n' must be a token count or -1 (the whole sequence)");
  if (g.mirostat != 0 && g.mirostat != 2) fail("mirostat", "'mirostat' is " + std::to_string(g.mirostat) + "; it must be 0 (off) or 2 (Mirostat 2.0)");
  if (!g.grammar.empty() && !g.json_schema.empty()) fail("json_schema", "give 'grammar' or 'json_schema', not both: each constrains the reply");
  if (!g.grammar.empty()) {
    try {
      sampling::Grammar::compile(g.grammar);
    } catch (const Error &e) {
      fail("grammar", e.what());
    }
  }
  if (!g.json_schema.empty()) {
    try {
      sampling::Schema::compile(nlohmann::ordered_json::parse(g.json_schema), /*strict=*/true);
    } catch (const std::exception &e) {
      fail("json_schema", std::string("'json_schema': ") + e.what() + " (give the schema as JSON text)");
    }
  }
}

const BackendConfig *RunConfig::backend(const std::string &name) const {
  for (const auto &b : backends)
    if (b.name == name) return &b;
  return nullptr;
}

RunConfig parse_run_config(const std::string &text, const std::string &source) {
  Reader r(source);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException &e) {
    throw Error(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) r.fail(root, "a run config must be a mapping with at least 'backends'");
  refuse_duplicate_keys(r, root);
  r.only_keys(root, {"backends", "placement", "plugin_dir", "log_level", "job", "demo", "model", "synthesize", "prompt",
                     "prompt_file", "prompts", "parallel", "system", "chat", "chat_template", "messages", "context", "batch", "kv_type",
                     "kv_pages", "kv_page_size", "generation", "server", "trace"},
              "the run config");

  RunConfig cfg;
  cfg.source = source;
  if (!root["backends"]) r.fail(root, "missing 'backends' (e.g. 'backends: {cpu: {}}')");
  read_backends(r, root["backends"], cfg);
  if (root["placement"]) read_placement(r, root["placement"], cfg);
  if (root["plugin_dir"]) cfg.plugin_dir = r.scalar(root["plugin_dir"], "plugin_dir");
  if (root["log_level"]) cfg.log_level = r.scalar(root["log_level"], "log_level");
  if (root["model"]) cfg.model = r.scalar(root["model"], "model");
  if (root["synthesize"]) read_synthesize(r, root["synthesize"], cfg.synthesize);
  if (root["prompt"]) cfg.prompt = r.scalar(root["prompt"], "prompt");
  if (root["prompt_file"]) cfg.prompt_file = r.scalar(root["prompt_file"], "prompt_file");
  if (const YAML::Node ps = root["prompts"]) {
    if (!ps.IsSequence() || ps.size() == 0) r.fail(ps, "'prompts' must be a non-empty list of prompts, run together");
    for (const auto &x : ps) {
      cfg.prompts.push_back(r.scalar(x, "a prompt of 'prompts'"));
      if (cfg.prompts.back().empty()) r.fail(x, "a prompt of 'prompts' is empty");
    }
    if (root["prompt"] || root["prompt_file"]) r.fail(ps, "'prompts' runs a list; leave out 'prompt' and 'prompt_file' beside it");
  }
  if (root["parallel"]) {
    cfg.parallel = r.as<int64_t>(root["parallel"], "parallel", "a sequence count");
    if (cfg.parallel < 1 || cfg.parallel > 1024) r.fail(root["parallel"], "'parallel' is " + std::to_string(cfg.parallel) + "; it must be 1 to 1024");
  }
  if (root["kv_pages"]) {
    cfg.kv_pages = r.as<int64_t>(root["kv_pages"], "kv_pages", "a page count");
    if (cfg.kv_pages < 1) r.fail(root["kv_pages"], "'kv_pages' must be at least 1 (leave it out to size the pool by the devices' memory)");
  }
  if (root["kv_page_size"]) {
    cfg.kv_page_size = r.as<int64_t>(root["kv_page_size"], "kv_page_size", "positions per page");
    if (cfg.kv_page_size < 1 || cfg.kv_page_size > 1024 || (cfg.kv_page_size & (cfg.kv_page_size - 1)))
      r.fail(root["kv_page_size"], "'kv_page_size' is " + std::to_string(cfg.kv_page_size) + "; it must be a power of two up to 1024 (16-64 usual)");
  }
  if (root["system"]) cfg.system = r.scalar(root["system"], "system");
  if (root["chat"]) cfg.chat = r.as<bool>(root["chat"], "chat", "true or false");
  if (root["chat_template"]) cfg.chat_template = r.scalar(root["chat_template"], "chat_template");
  if (const YAML::Node m = root["messages"]) {
    if (!m.IsSequence()) r.fail(m, "'messages' must be a list of {role: ..., content: ...}");
    for (const auto &x : m) {
      r.expect_map(x, "a message");
      r.only_keys(x, {"role", "content"}, "a message");
      if (!x["role"] || !x["content"]) r.fail(x, "a message needs both 'role' and 'content'");
      cfg.messages.push_back({r.scalar(x["role"], "role"), r.scalar(x["content"], "content")});
    }
  }
  // A template or a scripted conversation means a chat; saying chat: false as well contradicts it.
  if (!cfg.chat_template.empty() || !cfg.messages.empty()) {
    if (root["chat"] && !cfg.chat)
      r.fail(root["chat"], "'chat: false' contradicts '" + std::string(cfg.messages.empty() ? "chat_template" : "messages") +
                               "', which only a chat uses; remove one");
    cfg.chat = true;
  }
  if (root["context"]) {
    cfg.context = r.as<int64_t>(root["context"], "context", "a token count");
    if (cfg.context <= 0)
      r.fail(root["context"], "'context' is " + std::to_string(cfg.context) +
                                  "; it must be a positive number of positions (leave it out for min(the model's training context, 4096))");
  }
  if (root["batch"]) cfg.batch = r.as<int64_t>(root["batch"], "batch", "a token count");
  if (cfg.batch <= 0) r.fail(root["batch"], "'batch' is " + std::to_string(cfg.batch) + "; it must be a positive token count");
  if (root["kv_type"]) {
    cfg.kv_type = r.scalar(root["kv_type"], "kv_type");
    if (cfg.kv_type != "f16" && cfg.kv_type != "f32") r.fail(root["kv_type"], "'kv_type' is '" + cfg.kv_type + "'; expected f16 or f32");
  }
  if (root["generation"]) read_generation(r, root["generation"], cfg.generation);
  if (root["server"]) read_server(r, root["server"], cfg.server);
  if (root["trace"]) cfg.trace = r.scalar(root["trace"], "trace");
  cfg.job = cfg.model.empty() ? "demo" : "generate";
  if (root["job"]) {
    cfg.job = r.scalar(root["job"], "job");
    if (cfg.job != "demo" && cfg.job != "generate") r.fail(root["job"], "unknown job '" + cfg.job + "'; expected 'generate' or 'demo'");
    if (cfg.job == "generate" && cfg.model.empty()) r.fail(root["job"], "job 'generate' needs 'model: PATH'");
  }
  if (cfg.synthesize.enabled && cfg.model.empty()) r.fail(root["synthesize"], "'synthesize' needs 'model: PATH' (where the model is kept)");
  if (root["demo"]) read_demo(r, root["demo"], cfg.demo);

  if (cfg.default_backend.empty()) {
    if (cfg.backends.size() != 1)
      r.fail(root, "several backends are listed: say which is the default with "
                   "'placement: {default: NAME}'");
    cfg.default_backend = cfg.backends[0].name;
  }
  const YAML::Node placement = root["placement"];
  for (size_t i = 0; i < cfg.split_devices.size(); ++i)
    if (!cfg.backend(cfg.split_devices[i]))
      r.fail(placement["devices"][i], "'devices' names backend '" + cfg.split_devices[i] + "', which is not listed under 'backends'");
  if (!cfg.backend(cfg.default_backend))
    r.fail(placement ? placement["default"] : root,
           "default backend '" + cfg.default_backend + "' is not listed under 'backends'");
  const size_t shortcut = placement && placement["experts"] ? 1 : 0;
  if (shortcut && !cfg.backend(cfg.rules[0].backend))
    r.fail(placement["experts"], "'experts' sends the experts to backend '" + cfg.rules[0].backend + "', which is not listed under 'backends'");
  for (size_t i = shortcut; i < cfg.rules.size(); ++i)
    if (!cfg.backend(cfg.rules[i].backend))
      r.fail(placement["rules"][i - shortcut]["backend"],
             "rule sends nodes to backend '" + cfg.rules[i].backend +
                 "', which is not listed under 'backends'");
  return cfg;
}

RunConfig load_run_config(const std::string &path) {
  std::ifstream f(path);
  if (!f) throw Error(path + ": cannot open the run config (does the file exist?)");
  std::stringstream ss;
  ss << f.rdbuf();
  RunConfig cfg = parse_run_config(ss.str(), path);
  if (!cfg.plugin_dir.empty() && std::filesystem::path(cfg.plugin_dir).is_relative())
    cfg.plugin_dir =
        (std::filesystem::path(path).parent_path() / cfg.plugin_dir).lexically_normal().string();
  return cfg;
}

}  // namespace minfer
