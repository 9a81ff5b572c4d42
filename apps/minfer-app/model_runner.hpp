// apps/minfer-app/model_runner.hpp — a loaded model that answers: feeds tokens after those
// already in its KV cache, samples a reply, streams its text. Shared by the one-shot job and
// the interactive chat.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/run_config.hpp"
#include "gguf/gguf.hpp"
#include "models/model.hpp"
#include "runtime/generator.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"
#include "sampling/json_constraint.hpp"
#include "sampling/sampler.hpp"
#include "tokenizer/tokenizer.hpp"
#include "trace/trace.hpp"

namespace minfer::app {

struct Reply {
  std::string text;            // valid UTF-8, stop string removed: what the stream showed
  std::string raw;             // the generated tokens' bytes as they are (for re-rendering a chat)
  std::vector<int32_t> ids;    // generated tokens, the end-of-generation token not included
  std::string stop = "n_predict";  // n_predict, eos, stop string, context full
  int64_t prefilled = 0;       // tokens fed before the first sampled one
  double prefill_s = 0, decode_s = 0;
};

// The run config's generation settings as the sampler takes them (no constraint: see
// ModelRunner::sampling()).
sampling::Config sampling_config(const GenerationConfig &g);

class ModelRunner {
 public:
  // Loads the model (synthesizing it when the config says so) onto the backends, built for
  // max_seqs sequences at once (more than one: run them with a BatchSession; generate() and
  // the single-sequence calls are for one).
  explicit ModelRunner(const RunConfig &cfg, int64_t max_seqs = 1);

  const tokenizer::Tokenizer &tokenizer() const { return *tok_; }
  const gguf::File &file() const { return *file_; }
  const models::Model &model() const { return *model_; }
  Session &session() { return *session_; }
  double load_seconds() const { return load_s_; }
  int64_t n_ctx() const { return model_->opts.n_ctx; }
  // The KV pool in words: pages, positions, bytes (for --explain and the batch summary).
  std::string kv_summary() const;
  // sampling_config() with the run config's grammar or JSON schema as its constraint.
  sampling::Config sampling() const;

  // Every token of the sequence so far: fed to the cache, plus the last sampled one (fed with
  // the next call). The cache's positions follow this order.
  const std::vector<int32_t> &sequence() const { return seq_; }
  int64_t cached() const { return fed_; }  // tokens of the sequence already in the cache
  // Forgets the sequence from position n on (the cache rows past n are overwritten later).
  void rewind(int64_t n);

  // Feeds `tokens` after the sequence, then samples up to n_predict tokens; on_text gets each
  // piece of text as it becomes complete.
  Reply generate(const std::vector<int32_t> &tokens, int64_t n_predict, const std::function<void(const std::string &)> &on_text);

  // Writes the trace, when the run records one.
  void finish_trace();

 private:
  const RunConfig &cfg_;
  std::shared_ptr<gguf::File> file_;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::unique_ptr<models::Model> model_;
  BackendSet backends_;
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<Session> session_;
  std::unique_ptr<Generator> gen_;
  std::unique_ptr<sampling::Sampler> sampler_;
  std::vector<std::string> token_texts_;  // for the trace's top-k lists
  std::vector<int32_t> seq_;
  int64_t fed_ = 0;  // tokens of seq_ in the cache
  Logits logits_;  // after the last feed, valid until the next (empty: none yet)
  double load_s_ = 0;
};

}  // namespace minfer::app
