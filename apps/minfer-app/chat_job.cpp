// The interactive chat (minfer-app --interactive / -cnv): user lines from stdin, each answer
// streamed, the KV cache kept between turns so a turn prefills only its own tokens.
//
// Each turn renders the conversation through the model's chat template with the last reply
// replaced by a marker: what the template writes after the marker (the end of the reply's turn
// and the new user turn) is all that is tokenized and fed, after the reply exactly as the
// model generated it (a template may trim replies; the cache keeps what the model saw, as
// llama.cpp does). That holds while the template renders the earlier turns the same with or
// without the new one; a template that rewrites them falls back to the longest common prefix
// of the tokens, and the cache is rewound to it.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "chat/chat_template.hpp"
#include "common/error.hpp"
#include "generate_job.hpp"
#include "model_runner.hpp"

namespace minfer::app {
namespace {

// One user message: a line, continued on the next while it ends with a backslash.
// False at the end of the input (Ctrl-D).
bool read_user(std::string &out, bool tty) {
  out.clear();
  if (tty) std::fputs("> ", stdout), std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.back() == '\\') {
      out += line.substr(0, line.size() - 1) + "\n";
      if (tty) std::fputs(". ", stdout), std::fflush(stdout);
      continue;
    }
    out += line;
    return true;
  }
  return !out.empty();
}

}  // namespace

int run_chat(const RunConfig &cfg, const GenerateOptions &opts) {
  if (opts.json) throw Error("--interactive streams a conversation; it has no --json form");
  ModelRunner runner(cfg);
  const tokenizer::Tokenizer &tok = runner.tokenizer();
  const chat::ChatTemplate tmpl = chat::ChatTemplate::for_model(runner.file(), tok, cfg.chat_template);
  const bool tty = isatty(STDIN_FILENO);
  std::vector<chat::Message> msgs = conversation(cfg, "");
  // Stands for the last reply while the next turn is rendered; no real text contains it.
  const std::string marker = "\x1e\x1fminfer-reply\x1f\x1e";
  std::string first = read_prompt(cfg);
  if (tty)
    std::fprintf(stderr, "%s: chat with %s. A line ending in \\ continues; /clear starts over; Ctrl-D ends.\n", cfg.model.c_str(),
                 tmpl.origin().c_str());
  int turn = 0;
  for (std::string user; !first.empty() || read_user(user, tty);) {
    if (!first.empty()) user = std::move(first), first.clear();
    if (user == "/clear") {
      msgs = conversation(cfg, "");
      runner.rewind(0);
      turn = 0;
      std::fprintf(stderr, "[conversation cleared]\n");
      continue;
    }
    if (user.empty()) continue;
    std::vector<int32_t> fresh;
    int64_t reused = runner.cached();
    bool extended = false;
    if (!msgs.empty() && msgs.back().role == "assistant") {
      std::vector<chat::Message> marked = msgs;
      marked.back().content = marker;
      marked.push_back({"user", user});
      const std::string with_marker = tmpl.render(marked, /*add_generation_prompt=*/true);
      const size_t at = with_marker.find(marker);
      marked.pop_back();
      marked.pop_back();  // the conversation up to the last reply's prompt
      if (at != std::string::npos && with_marker.compare(0, at, tmpl.render(marked, true)) == 0) {
        fresh = tok.encode(with_marker.substr(at + marker.size()), /*add_special=*/false, /*parse_special=*/true);
        extended = true;
      }
    }
    msgs.push_back({"user", user});
    if (!extended) {
      const std::vector<int32_t> all = chat::tokenize_prompt(tok, tmpl.render(msgs, /*add_generation_prompt=*/true));
      const std::vector<int32_t> &have = runner.sequence();
      size_t common = 0;
      while (common < all.size() && common < have.size() && all[common] == have[common]) ++common;
      if (common == all.size() && common > 0) --common;  // a turn feeds at least one token
      runner.rewind(int64_t(common));
      reused = runner.cached();
      fresh.assign(all.begin() + long(common), all.end());
    }
    const int64_t need = int64_t(runner.sequence().size() + fresh.size()) + 1;  // and one to answer
    if (need >= runner.n_ctx()) {
      msgs.pop_back();
      std::fprintf(stderr, "[the context is full: this turn needs %lld of %lld positions; /clear starts a new conversation]\n",
                   (long long)need, (long long)runner.n_ctx());
      continue;
    }
    ++turn;
    const Reply r = runner.generate(fresh, cfg.generation.n_predict, [](const std::string &piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    std::fputs("\n", stdout);
    std::fflush(stdout);
    msgs.push_back({"assistant", r.text});
    std::fprintf(stderr, "[turn %d: prefilled %lld tokens (%lld from the cache) in %.1f ms | %zu tokens, %.1f tok/s | stop: %s]\n",
                 turn, (long long)r.prefilled, (long long)reused, r.prefill_s * 1e3, r.ids.size(),
                 r.ids.size() > 1 ? double(r.ids.size()) / r.decode_s : 0.0, r.stop.c_str());
    if (r.stop == "context full")
      std::fprintf(stderr, "[the context is full (%lld positions); /clear starts a new conversation]\n", (long long)runner.n_ctx());
  }
  runner.finish_trace();
  return 0;
}

}  // namespace minfer::app
