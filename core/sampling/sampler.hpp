// core/sampling/sampler.hpp — choosing the next token from logits.
//
// The chain, in llama.cpp's default order: logit biases, repetition penalty over the last tokens, top-k,
// temperature, top-p, min-p, then a draw from what is left (a seeded generator). A
// temperature of 0 is greedy: the arg-max, after the penalty.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <utility>
#include <vector>

namespace minfer::sampling {

class TokenConstraint;  // json_constraint.hpp

struct Config {
  float temperature = 0.8f;    // 0 = greedy
  int32_t top_k = 40;          // 0 = off
  float top_p = 0.95f;         // 1 = off
  float min_p = 0.05f;         // 0 = off: drop tokens below min_p * p(best)
  float repeat_penalty = 1.0f; // 1 = off; > 1 makes recent tokens less likely
  int32_t repeat_last_n = 64;  // how many recent tokens the penalties look at (-1: all)
  // OpenAI's penalties over the same window: a token seen c times loses
  // c * frequency_penalty + (c > 0) * presence_penalty from its logit (0 = off).
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  // OpenAI's logit_bias: added to these tokens' logits before anything else (-100 bans a
  // token in practice, +100 all but forces it).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Only tokens it allows are chosen (each sampler takes a fresh copy): response_format.
  std::shared_ptr<const TokenConstraint> constraint;
  uint64_t seed = 42;
  // The samplers llama.cpp adds, each off at its default (llama.cpp's names and meanings):
  float typical_p = 1.0f;     // locally typical: the tokens nearest the distribution's entropy, up to this mass
  float top_n_sigma = -1.0f;  // > 0: only logits within n standard deviations of the best
  float xtc_probability = 0.0f, xtc_threshold = 0.1f;  // with this chance, every token above the threshold but the least likely goes
  // DRY: a token that would repeat a sequence already seen (its match at least allowed_length
  // long) loses multiplier * base^(match - allowed_length); matches do not reach past a
  // breaker token (dry_breakers: the tokens holding a breaker string). last_n: the window (-1: all).
  float dry_multiplier = 0.0f, dry_base = 1.75f;
  int32_t dry_allowed_length = 2, dry_penalty_last_n = -1;
  std::vector<int32_t> dry_breakers;  // sorted
  // Mirostat 2.0 (1: llama.cpp's mode number for the first version, not here): the tokens
  // whose surprise is below mu, mu steered toward tau by eta; replaces top-k, top-p, min-p.
  int32_t mirostat = 0;
  float mirostat_tau = 5.0f, mirostat_eta = 0.1f;
};

// DRY's breakers from their texts: the tokens (of a vocabulary's texts) holding one, sorted.
std::vector<int32_t> tokens_holding(const std::vector<std::string> &texts, const std::vector<std::string> &strings);

// A sampled token's log-probability under the model (log-softmax of the raw logits: before
// penalties and temperature, as OpenAI reports them), and the `n` likeliest tokens with
// theirs, best first.
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprobs log_probs(const float *logits, int64_t n_vocab, int32_t token, int32_t n);

class Sampler {
 public:
  explicit Sampler(const Config &c);
  Sampler(Sampler &&) noexcept;
  Sampler &operator=(Sampler &&) noexcept;
  ~Sampler();
  // history: the tokens so far (prompt and generated), for the repetition penalty.
  int32_t sample(const float *logits, int64_t n_vocab, const std::vector<int32_t> &history);
  const Config &config() const { return cfg_; }
  // The chain is the arg-max of the raw logits, whatever the history (temperature 0, no bias,
  // no penalty), though a constraint may refuse that token.
  bool argmax_chain() const {
    return cfg_.temperature <= 0.0f && cfg_.logit_bias.empty() && cfg_.dry_multiplier == 0.0f &&
           ((cfg_.repeat_penalty == 1.0f && cfg_.presence_penalty == 0.0f && cfg_.frequency_penalty == 0.0f) || cfg_.repeat_last_n == 0);
  }
  // The arg-max of the logits, always: an argmax_chain with no constraint.
  bool greedy() const { return argmax_chain() && !constraint_; }
  // With argmax_chain(): t, the raw logits' arg-max (the backend's), is what sample() would
  // choose when no constraint refuses it; then it is taken (the constraint accepts it) and
  // true comes back. False: the logits are needed, sample() them.
  bool take_argmax(int32_t t);

 private:
  int32_t choose(int64_t n);  // from work_: the chain after the penalties
  void dry(const std::vector<int32_t> &history, int64_t n);  // DRY's penalties on work_
  Config cfg_;
  float mu_ = 0.0f;  // mirostat's running bound on surprise
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::unique_ptr<TokenConstraint> constraint_;
  std::vector<uint8_t> allowed_;  // the constraint's mask, when the chain's choice was refused
};

}  // namespace minfer::sampling
