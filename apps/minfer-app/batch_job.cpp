// apps/minfer-app/batch_job.cpp — many prompts at once (`prompts:` or --prompt-file FILE
// --parallel N): every prompt becomes a sequence of one BatchSession, continuous batching
// runs them together, and each result is written in input order (text, or with --json one
// object per line), whatever order they finish in.
#include <chrono>
#include <cstdio>
#include <map>

#include "chat/chat_template.hpp"
#include "common/error.hpp"
#include "common/json.hpp"
#include "common/utf8.hpp"
#include "generate_job.hpp"
#include "model_runner.hpp"
#include "runtime/batch_session.hpp"

namespace minfer::app {
namespace {

using Clock = std::chrono::steady_clock;

// One prompt's sequence as it runs: its tokens, its text so far, why it ended.
struct Job {
  std::string prompt, error;
  std::vector<int32_t> tokens, ids;
  std::unique_ptr<tokenizer::StreamDecoder> decoder;
  std::string text;
  std::string stop;  // empty while running; then n_predict, eos, stop string, context full
  int64_t max_tokens = 0;
};

}  // namespace

int run_batch(const RunConfig &cfg, const GenerateOptions &opts) {
  if (cfg.prompts.empty()) throw Error("no prompts: give 'prompts:' in " + cfg.source + " or --prompt-file FILE (one prompt per line)");
  const int64_t parallel = cfg.parallel > 0 ? cfg.parallel : std::min<int64_t>(int64_t(cfg.prompts.size()), 16);
  ModelRunner runner(cfg, parallel);
  if (opts.explain) {
    std::fputs(runner.session().explain().c_str(), stdout);
    std::printf("%s\n", runner.kv_summary().c_str());
    return 0;
  }
  const tokenizer::Tokenizer &tok = runner.tokenizer();
  const models::Model &model = runner.model();
  const int64_t n_ctx = model.opts.n_ctx;
  std::unique_ptr<chat::ChatTemplate> tmpl;
  if (cfg.chat) tmpl = std::make_unique<chat::ChatTemplate>(chat::ChatTemplate::for_model(runner.file(), tok, cfg.chat_template));

  BatchSession batch(model, runner.session(), [&](int32_t t) { return tok.is_end_of_generation(t); });
  // The same seed for each: a prompt's output is the one it gets alone.
  const sampling::Config sc = runner.sampling();

  std::vector<Job> jobs(cfg.prompts.size());
  int64_t submitted = 0, prompt_tokens = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job &j = jobs[i];
    j.prompt = cfg.prompts[i];
    j.tokens = tmpl ? chat::tokenize_prompt(tok, tmpl->render(conversation(cfg, j.prompt), /*add_generation_prompt=*/true))
                    : tok.encode(j.prompt, /*add_special=*/true, /*parse_special=*/false);
    j.decoder = std::make_unique<tokenizer::StreamDecoder>(tok, /*at_sequence_start=*/false);
    if (int64_t(j.tokens.size()) >= n_ctx) {
      j.error = "the prompt has " + std::to_string(j.tokens.size()) + " tokens but the context holds " + std::to_string(n_ctx) +
                "; shorten it or raise 'context' in " + cfg.source;
      continue;
    }
    j.max_tokens = std::min<int64_t>(cfg.generation.n_predict, n_ctx - int64_t(j.tokens.size()));
    if (j.max_tokens == 0) {
      j.stop = "n_predict";
      continue;
    }
    batch.submit({int64_t(i), j.tokens, j.max_tokens, sc});
    ++submitted, prompt_tokens += int64_t(j.tokens.size());
  }

  size_t written = 0;  // results are written in input order, each once all before it are
  bool failed = false;
  auto write_ready = [&] {
    for (; written < jobs.size() && (!jobs[written].stop.empty() || !jobs[written].error.empty()); ++written) {
      const Job &j = jobs[written];
      failed |= !j.error.empty();
      if (opts.json) {
        json::Json o = {{"index", written}, {"prompt", utf8::sanitize(j.prompt)}};
        if (!j.error.empty()) o["error"] = j.error;
        else o.update({{"text", j.text}, {"prompt_tokens", j.tokens.size()}, {"tokens", j.ids.size()}, {"stop", j.stop}, {"token_ids", j.ids}});
        std::printf("%s\n", json::dump(o).c_str());
      } else if (!j.error.empty()) {
        std::fprintf(stderr, "prompt %zu: %s\n", written, j.error.c_str());
      } else {
        std::printf("%s%s\n\n", utf8::sanitize(j.prompt).c_str(), j.text.c_str());
      }
      std::fflush(stdout);
    }
  };
  write_ready();
  const auto start = Clock::now();
  int64_t generated = 0;
  for (int64_t done = 0; done < submitted;) {
    for (const SeqToken &t : batch.step()) {
      Job &j = jobs[size_t(t.id)];
      if (!j.stop.empty()) continue;  // ended by a stop string this step
      j.ids.push_back(t.token);
      ++generated;
      j.text += j.decoder->push(t.token);
      for (const std::string &s : cfg.generation.stop)
        if (const size_t at = s.empty() ? std::string::npos : j.text.find(s); at != std::string::npos) {
          j.text.erase(at);
          j.stop = "stop string";
          batch.cancel(t.id);
          break;
        }
    }
    for (const sched::Finished &f : batch.take_finished()) {
      Job &j = jobs[size_t(f.id)];
      ++done;
      if (!j.stop.empty()) continue;  // a stop string cancelled it
      j.text += j.decoder->flush();
      j.stop = f.reason == "stop" ? "eos" : int64_t(j.ids.size()) >= cfg.generation.n_predict ? "n_predict" : "context full";
    }
    write_ready();
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  runner.finish_trace();
  const BatchStats &st = batch.stats();
  std::fprintf(stderr,
               "load %.2f s | %zu prompts, %lld at once | prompt %lld tokens | generated %lld tokens in %.2f s, %.1f tok/s | %lld steps, "
               "at most %lld sequences a step | %lld preemptions, %lld prompt positions reused\n%s\n",
               runner.load_seconds(), jobs.size(), (long long)parallel, (long long)prompt_tokens, (long long)generated, secs,
               secs > 0 ? double(generated) / secs : 0.0, (long long)st.steps, (long long)st.most_seqs,
               (long long)batch.scheduler().preemptions(), (long long)batch.scheduler().reused_positions(), runner.kv_summary().c_str());
  return failed ? 1 : 0;
}

}  // namespace minfer::app
