#include <sys/resource.h>

#include "generate_job.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "common/json.hpp"
#include "common/progress.hpp"
#include "common/utf8.hpp"
#include "models/model.hpp"
#include "runtime/generator.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"
#include "sampling/sampler.hpp"
#include "synth/synth.hpp"
#include "tokenizer/tokenizer.hpp"

namespace fs = std::filesystem;

namespace minfer::app {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Writes the configured synthetic model when the model file is missing.
void synthesize_if_missing(const RunConfig &cfg) {
  if (!cfg.synthesize.enabled || fs::exists(cfg.model)) return;
  if (fs::path(cfg.model).has_parent_path()) fs::create_directories(fs::path(cfg.model).parent_path());
  synth::Options o;
  o.arch = cfg.synthesize.arch;
  o.preset = cfg.synthesize.preset;
  o.type = cfg.synthesize.type;
  o.seed = cfg.synthesize.seed;
  o.vocab_path = cfg.synthesize.vocab;
  if (!o.vocab_path.empty() && !fs::exists(o.vocab_path)) {  // optional: fall back to a made-up vocabulary
    spdlog::info("synthesize: {} not found; generating a byte-level vocabulary instead", o.vocab_path);
    o.vocab_path.clear();
  }
  o.out = cfg.model;
  ProgressBar bar("synthesize");
  o.progress = [&](double f, const std::string &name) { bar.update(f, name); };
  const synth::Report r = synth::synthesize(o);
  bar.done(cfg.model + ": " + o.arch + "/" + o.preset + " " + o.type + ", " + human_bytes(r.file_bytes) + " (made once, then reused)");
}

std::string read_prompt(const RunConfig &cfg) {
  if (!cfg.prompt_file.empty()) {
    std::error_code ec;
    if (fs::is_directory(cfg.prompt_file, ec))
      throw Error(cfg.prompt_file + ": the prompt file is a directory; give a text file (prompt_file: or -f)");
    std::ifstream in(cfg.prompt_file, std::ios::binary);
    if (!in) throw Error(cfg.prompt_file + ": cannot open the prompt file");
    std::stringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw Error(cfg.prompt_file + ": reading the prompt file failed");
    return ss.str();
  }
  return cfg.prompt;
}

std::string ids_json(const std::vector<int32_t> &ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// ChatML, the template of Qwen2 instruct models.
std::string apply_chat_template(const gguf::File &f, const tokenizer::Tokenizer &tok, const std::string &system,
                                const std::string &user) {
  const std::string tmpl = f.get_or<std::string>("tokenizer.chat_template", "");
  const bool chatml = tmpl.find("<|im_start|>") != std::string::npos || tok.find("<|im_start|>") >= 0;
  if (!chatml)
    throw Error(f.path() + ": 'chat: true' needs a chat template minfer knows (ChatML, as Qwen2 models use); this model has " +
                (tmpl.empty() ? std::string("none") : "another one") + ". Set 'chat: false' and write the prompt in full");
  std::string s;
  if (!system.empty()) s += "<|im_start|>system\n" + system + "<|im_end|>\n";
  return s + "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
}

}  // namespace

int run_generate(const RunConfig &cfg, const GenerateOptions &opts) {
  const auto t_load = Clock::now();
  synthesize_if_missing(cfg);
  if (!fs::exists(cfg.model))
    throw Error(cfg.model + ": model file not found; check 'model' in " + cfg.source + " (paths are relative to the working directory)");
  // The prompt first: a missing one fails before seconds of loading. Checked on the text, not
  // the tokens: an SPM vocabulary turns "" into BOS alone.
  const std::string user = opts.explain ? std::string() : read_prompt(cfg);
  if (!opts.explain && user.empty())
    throw Error(std::string("the prompt is empty") + (cfg.prompt_file.empty() ? "" : " (" + cfg.prompt_file + " holds nothing)") +
                "; give one with 'prompt:' or 'prompt_file:' in " + cfg.source + ", -p TEXT or -f FILE");
  auto file = gguf::File::open(cfg.model);
  const auto tok = tokenizer::Tokenizer::from_gguf(*file);
  models::BuildOptions bo;
  bo.n_ctx = cfg.context;
  bo.max_batch = cfg.batch;
  bo.kv_type = cfg.kv_type == "f32" ? MINFER_DTYPE_F32 : MINFER_DTYPE_F16;
  const auto model = models::load_model(file, bo);
  if (cfg.context > model->hp.n_ctx_train)
    spdlog::warn("context {} is more than the {} positions {} was trained on; past those its output usually degrades",
                 cfg.context, model->hp.n_ctx_train, cfg.model);
  BackendSet backends = open_backends(cfg);
  std::unique_ptr<Trace> trace;
  if (const std::string tp = Trace::path_from(cfg.trace); !tp.empty()) {
    trace = std::make_unique<Trace>(tp);
    trace->set_model(file->get_or<std::string>("general.name", cfg.model), model->hp.arch, cfg.source);
  }
  ProgressBar load_bar("load");
  bool uploaded = false;
  Session session(model->graph, cfg, backends, trace.get(), [&](double f, const std::string &name) {
    load_bar.update(f, name);
    uploaded = true;
  });
  if (uploaded) load_bar.done(cfg.model + ": weights copied to the backends");
  if (opts.explain) {
    std::fputs(session.explain().c_str(), stdout);
    return 0;
  }
  const double load_s = seconds_since(t_load);

  const std::string text = cfg.chat ? apply_chat_template(*file, *tok, cfg.system, user) : user;
  std::vector<int32_t> prompt = tok->encode(text, true, cfg.chat);
  if (prompt.empty()) throw Error("the prompt is empty; give one with 'prompt:' in " + cfg.source + " or -p TEXT");
  if (int64_t(prompt.size()) >= model->opts.n_ctx)
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens but the context holds " + std::to_string(model->opts.n_ctx) +
                "; shorten it or raise 'context' in " + cfg.source);

  sampling::Config sc;
  sc.temperature = cfg.generation.temperature;
  sc.top_k = cfg.generation.top_k;
  sc.top_p = cfg.generation.top_p;
  sc.min_p = cfg.generation.min_p;
  sc.repeat_penalty = cfg.generation.repeat_penalty;
  sc.repeat_last_n = cfg.generation.repeat_last_n;
  sc.seed = cfg.generation.seed;
  sampling::Sampler sampler(sc);
  Generator gen(*model, session);
  tokenizer::StreamDecoder decoder(*tok, /*at_sequence_start=*/false);  // the answer continues the prompt

  if (!opts.json) {
    const std::string shown = utf8::sanitize(user);  // stdout carries valid UTF-8 only
    std::fwrite(shown.data(), 1, shown.size(), stdout);  // echo the prompt, then stream the answer
    std::fflush(stdout);
  }
  const auto t_prefill = Clock::now();
  const std::vector<float> &logits = gen.feed(prompt);  // the generator's buffer: each feed refreshes it
  const double prefill_s = seconds_since(t_prefill);
  std::vector<std::string> token_texts;  // for the trace's top-k lists
  if (trace)
    for (int32_t i = 0; i < tok->n_vocab(); ++i) token_texts.push_back(tok->token_bytes(i, true));

  std::vector<int32_t> history = prompt, generated_ids;
  std::string out;
  int64_t generated = 0;
  std::string stop_reason = "n_predict";
  const auto t_decode = Clock::now();
  while (generated < cfg.generation.n_predict) {
    const int32_t next = sampler.sample(logits.data(), int64_t(logits.size()), history);
    if (trace) trace->sample(logits.data(), int64_t(logits.size()), next, token_texts);
    if (tok->is_end_of_generation(next)) {
      stop_reason = "eos";
      break;
    }
    history.push_back(next);
    generated_ids.push_back(next);
    ++generated;
    const std::string piece = decoder.push(next);
    out += piece;
    if (!opts.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    bool stopped = false;
    for (const auto &s : cfg.generation.stop)
      if (!s.empty() && out.size() >= s.size() && out.compare(out.size() - s.size(), s.size(), s) == 0) {
        out.erase(out.size() - s.size());
        stopped = true;
      }
    if (stopped) {
      stop_reason = "stop string";
      break;
    }
    if (gen.n_past() >= gen.n_ctx()) {
      stop_reason = "context full";
      break;
    }
    if (generated < cfg.generation.n_predict) gen.feed({next});
  }
  const std::string tail = decoder.flush();
  out += tail;
  const double decode_s = seconds_since(t_decode);
  const double prefill_tps = double(prompt.size()) / prefill_s, decode_tps = generated > 1 ? double(generated) / decode_s : 0.0;

  if (trace) {
    trace->write();
    std::fprintf(stderr, "trace written to %s (nodes ran one at a time: each timing includes a sync)\n", trace->path().c_str());
  }
  if (opts.json) {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: the process's peak resident set, in KiB
    std::printf("{\"prompt_tokens\": %zu, \"tokens\": %lld, \"text\": %s, \"prompt_token_ids\": %s, \"token_ids\": %s, "
                "\"stop\": %s, \"load_s\": %s, \"prefill_tok_s\": %s, \"decode_tok_s\": %s, \"peak_rss_mb\": %s}\n",
                prompt.size(), (long long)generated, json::quote(out).c_str(), ids_json(prompt).c_str(),
                ids_json(generated_ids).c_str(), json::quote(stop_reason).c_str(),
                json::number(load_s).c_str(), json::number(prefill_tps).c_str(), json::number(decode_tps).c_str(),
                json::number(double(usage.ru_maxrss) * 1024 / 1e6).c_str());
  } else {
    std::printf("%s\n", tail.c_str());
    std::fprintf(stderr, "load %.2f s | prompt %zu tokens, %.1f tok/s | generated %lld tokens, %.1f tok/s | stop: %s\n", load_s,
                 prompt.size(), prefill_tps, (long long)generated, decode_tps, stop_reason.c_str());
  }
  return 0;
}

}  // namespace minfer::app
