// core/runtime/batch_session.hpp — many sequences through one model at once: the scheduler's
// plans run as steps of a session whose graph was built for `max_seqs` slots over a paged KV
// cache, each sequence sampled with its own parameters and seed.
//
// The three rooms of continuous batching (SERVING.md; vLLM's split): the scheduler decides
// what runs (core/runtime/scheduler), the page pool keeps the KV accounting
// (core/runtime/page_pool), and this runner turns a plan into the step's inputs — tokens,
// positions, slots, the page table, the rows whose logits are read — runs it and samples.
// It knows no kernels (the session's backends run them) and no HTTP.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "models/model.hpp"
#include "runtime/page_pool.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/session.hpp"
#include "sampling/sampler.hpp"

namespace minfer {

struct SeqRequest {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;  // tokens to generate at most
  sampling::Config sampling;  // its own parameters and seed: its output does not depend on the others
  int32_t logprobs = -1;  // -1: none; n >= 0: each token's log-probability and the n likeliest tokens'
  // An embedding: the prompt's last hidden state (after the final norm) comes back in place
  // of a token, and the request ends "length" (max_tokens 1). The model must be built with
  // BuildOptions::embeddings.
  bool embed = false;
  // The prompt's log-probabilities (completions' echo with logprobs): n >= 0 alternatives for
  // each prompt token after the first, given the tokens before it; they come as SeqTokens with
  // `prompt` set, in order, before the generated tokens.
  int32_t prompt_logprobs = -1;
};

// A token a step produced for a sequence (the end-of-generation token is not one), or with
// `prompt`, a prompt token's log-probability (SeqRequest::prompt_logprobs).
struct SeqToken {
  int64_t id = 0;
  int32_t token = 0;
  std::optional<sampling::TokenLogprobs> logprobs;  // when its request asked for them
  std::vector<float> embedding;  // an embed request's: n_embd values, and token is -1
  bool prompt = false;
};

struct BatchStats {
  int64_t steps = 0, prefill_tokens = 0, decode_tokens = 0;  // tokens run (prefill: prompt and recomputed ones)
  int64_t most_seqs = 0;  // the most sequences one step carried
  int64_t greedy_steps = 0;  // steps whose tokens came from the backend's arg-max (no logits read)
  // Sampled rows: those whose token was the backend's arg-max (greedy, and greedy under a
  // constraint that allowed it), and those whose logits were read.
  int64_t argmax_rows = 0, logit_rows = 0;
  double run_s = 0, logits_s = 0, sample_s = 0;  // seconds in the session's steps, reading logits, sampling
  // Seconds of the steps that carried prefill (decode) tokens: a mixed step counts in both,
  // so tokens / seconds is the rate each kind of work saw while it ran.
  double prefill_step_s = 0, decode_step_s = 0;
};

class BatchSession {
 public:
  // model: built with max_seqs slots (BuildOptions); session: its graph made runnable.
  // is_end: whether a sampled token ends its sequence (the tokenizer's end-of-generation ids).
  BatchSession(const models::Model &model, Session &session, std::function<bool(int32_t)> is_end);

  // Queues a request; throws minfer::Error naming it when it can never run.
  void submit(SeqRequest r);
  // Ends a request wherever it is; its pages and slot return at once.
  void cancel(int64_t id);
  bool idle() const { return sched_.waiting() == 0 && sched_.running() == 0; }

  // Runs one step of what the scheduler plans (nothing when idle) and samples every sequence
  // that reached a token; returns those tokens in plan order.
  std::vector<SeqToken> step();
  // Requests finished since the last call, in the order they finished.
  std::vector<sched::Finished> take_finished();

  // Called with each sequence's logits as they are sampled (logprobs, tests); the span lives
  // for the call.
  void on_logits(std::function<void(int64_t id, std::span<const float> logits)> f) { on_logits_ = std::move(f); }

  const kv::PagePool &pool() const { return pool_; }
  const sched::Scheduler &scheduler() const { return sched_; }
  const BatchStats &stats() const { return stats_; }

 private:
  struct Seq {
    sampling::Sampler sampler;
    std::vector<int32_t> history;  // prompt and generated tokens, for the repetition penalty
    int32_t slot = -1;             // while running
    int32_t logprobs = -1;         // SeqRequest::logprobs
    bool embed = false;            // SeqRequest::embed
    int32_t prompt_logprobs = -1;  // SeqRequest::prompt_logprobs
    int64_t prompt_done = 0;       // prompt tokens (after the first) whose log-probability went out
    int64_t prompt_size = 0;
  };
  int32_t slot_for(int64_t id);
  void release_slot(int64_t id);

  const models::Model &model_;
  Session &session_;
  std::function<bool(int32_t)> is_end_;
  std::function<void(int64_t, std::span<const float>)> on_logits_;
  kv::PagePool pool_;
  sched::Scheduler sched_;
  std::map<int64_t, Seq> seqs_;
  std::vector<int64_t> slot_owner_;  // request id per slot, -1 when free
  std::vector<sched::Finished> finished_;
  BatchStats stats_;
  // The step's inputs, reused from step to step (no allocation once they reached their size).
  std::vector<int32_t> tokens_, positions_, slots_, rows_, table_;
  HostMemory logits_;  // the rows read in a step, in the backend's own memory where it has some (grows)
  std::vector<float> hidden_;
  HostMemory argmax_;  // the backend's arg-max of each output row, read with the step (grows)
  // Each output row's owner: the sampled item's index among those that want logits, or, for a
  // prompt row (prompt_rows), -1 with the sequence and the position it stands at.
  struct Row {
    int64_t item = -1, seq = 0, pos = 0;
  };
  std::vector<Row> row_of_;
};

}  // namespace minfer
