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
};

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
    return cfg_.temperature <= 0.0f && cfg_.logit_bias.empty() &&
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
  Config cfg_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::unique_ptr<TokenConstraint> constraint_;
  std::vector<uint8_t> allowed_;  // the constraint's mask, when the chain's choice was refused
};

}  // namespace minfer::sampling
