#include <sys/resource.h>

#include "generate_job.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_template.hpp"
#include "common/error.hpp"
#include "common/json.hpp"
#include "common/utf8.hpp"
#include "model_runner.hpp"

namespace fs = std::filesystem;

namespace minfer::app {

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

std::vector<chat::Message> conversation(const RunConfig &cfg, const std::string &user) {
  std::vector<chat::Message> msgs;
  if (!cfg.system.empty()) msgs.push_back({"system", cfg.system});
  for (const auto &m : cfg.messages) msgs.push_back({m.role, m.content});
  if (!user.empty()) msgs.push_back({"user", user});
  return msgs;
}

int run_generate(const RunConfig &cfg, const GenerateOptions &opts) {
  if (opts.interactive) return run_chat(cfg, opts);
  if (!cfg.prompts.empty()) return run_batch(cfg, opts);
  // The prompt first: a missing one fails before seconds of loading. Checked on the text, not
  // the tokens: an SPM vocabulary turns "" into BOS alone.
  const std::string user = opts.explain ? std::string() : read_prompt(cfg);
  if (!opts.explain && user.empty() && !(cfg.chat && !cfg.messages.empty()))
    throw Error(std::string("the prompt is empty") + (cfg.prompt_file.empty() ? "" : " (" + cfg.prompt_file + " holds nothing)") +
                "; give one with 'prompt:' or 'prompt_file:' in " + cfg.source + ", -p TEXT or -f FILE");
  ModelRunner runner(cfg);
  if (opts.explain) {
    std::fputs(runner.session().explain().c_str(), stdout);
    std::printf("%s\n", runner.kv_summary().c_str());
    return 0;
  }
  const tokenizer::Tokenizer &tok = runner.tokenizer();
  std::vector<int32_t> prompt;
  if (cfg.chat) {
    const chat::ChatTemplate t = chat::ChatTemplate::for_model(runner.file(), tok, cfg.chat_template);
    prompt = chat::tokenize_prompt(tok, t.render(conversation(cfg, user), /*add_generation_prompt=*/true));
  } else {
    prompt = tok.encode(user, /*add_special=*/true, /*parse_special=*/false);
  }
  if (int64_t(prompt.size()) >= runner.n_ctx())
    throw Error("the prompt has " + std::to_string(prompt.size()) + " tokens but the context holds " + std::to_string(runner.n_ctx()) +
                "; shorten it or raise 'context' in " + cfg.source);

  if (!opts.json) {
    const std::string shown = utf8::sanitize(user);  // stdout carries valid UTF-8 only
    std::fwrite(shown.data(), 1, shown.size(), stdout);  // echo the prompt, then stream the answer
    std::fflush(stdout);
  }
  const Reply r = runner.generate(prompt, cfg.generation.n_predict, [&](const std::string &piece) {
    if (opts.json) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  });
  runner.finish_trace();
  const double prefill_tps = double(prompt.size()) / r.prefill_s;
  const double decode_tps = r.ids.size() > 1 ? double(r.ids.size()) / r.decode_s : 0.0;
  if (opts.json) {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: the process's peak resident set, in KiB
    json::Json j = {{"prompt_tokens", prompt.size()},
                    {"tokens", r.ids.size()},
                    {"text", r.text},
                    {"prompt_token_ids", prompt},
                    {"token_ids", r.ids},
                    {"stop", r.stop},
                    {"load_s", json::number(runner.load_seconds())},
                    {"prefill_tok_s", json::number(prefill_tps)},
                    {"decode_tok_s", json::number(decode_tps)},
                    {"peak_rss_mb", json::number(double(usage.ru_maxrss) * 1024 / 1e6)}};
    std::printf("%s\n", json::dump(j).c_str());
  } else {
    std::printf("\n");
    std::fflush(stdout);  // the text ends before the timing line, also when both go to one file
    std::fprintf(stderr, "load %.2f s | prompt %zu tokens, %.1f tok/s | generated %zu tokens, %.1f tok/s | stop: %s\n",
                 runner.load_seconds(), prompt.size(), prefill_tps, r.ids.size(), decode_tps, r.stop.c_str());
  }
  return 0;
}

}  // namespace minfer::app
