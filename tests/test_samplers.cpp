// llama.cpp's samplers beyond temperature, top-k, top-p and min-p (core/sampling/sampler.hpp):
// DRY, XTC, top-n-sigma, locally typical sampling and Mirostat 2.0, each on logits whose
// answer is known.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "sampling/sampler.hpp"

using minfer::sampling::Config;
using minfer::sampling::Sampler;

namespace {

// Logits whose softmax is p.
std::vector<float> logits_of(const std::vector<double> &p) {
  std::vector<float> l;
  for (double x : p) l.push_back(float(std::log(x)));
  return l;
}

}  // namespace

// A token that would go on repeating "1 2 3" (seen before as "1 2 3 4") loses DRY's penalty,
// so the next best comes instead; a breaker inside the repeat cuts the match short of
// allowed_length and the penalty goes.
TEST(Samplers, DryPenalizesTheTokenThatRepeatsASequence) {
  Config c;
  c.temperature = 0;
  c.dry_multiplier = 2.0f;
  const std::vector<float> logits = {0, 0, 0, 0, 1.0f, 0.9f};  // 4 best, then 5
  const std::vector<int32_t> history = {1, 2, 3, 4, 0, 1, 2, 3};
  Sampler plain([&] { Config g; g.temperature = 0; return g; }());
  EXPECT_EQ(plain.sample(logits.data(), 6, history), 4);
  Sampler dry(c);
  EXPECT_FALSE(dry.argmax_chain()) << "DRY changes the logits even for greedy sampling";
  EXPECT_EQ(dry.sample(logits.data(), 6, history), 5) << "4 would repeat 1 2 3 4: a match of 3, penalty 2 * 1.75";
  Config b = c;
  b.dry_breakers = {2};
  EXPECT_EQ(Sampler(b).sample(logits.data(), 6, history), 4) << "the breaker 2 leaves a match of 1 (just 3), below allowed_length 2";
  Config shortwin = c;
  shortwin.dry_penalty_last_n = 4;
  EXPECT_EQ(Sampler(shortwin).sample(logits.data(), 6, history), 4) << "the earlier 1 2 3 4 is outside the last 4 tokens";
}

// XTC at probability 1: of the tokens at or above the threshold, all but the least likely go.
TEST(Samplers, XtcDropsTheTopChoicesButTheLeastLikelyOfThem) {
  const auto l = logits_of({0.5, 0.3, 0.15, 0.05});
  std::set<int32_t> seen;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    Config c;
    c.temperature = 1, c.top_k = 0, c.top_p = 1, c.min_p = 0, c.seed = seed;
    c.xtc_probability = 1.0f, c.xtc_threshold = 0.2f;
    seen.insert(Sampler(c).sample(l.data(), 4, {}));
  }
  EXPECT_EQ(seen.count(0), 0u) << "token 0 (0.5) is above the threshold and not the least likely there";
  EXPECT_EQ(seen.count(1), 1u);
  EXPECT_EQ(seen.count(2), 1u);
}

// top-n-sigma with a small n keeps only the logits near the best; locally typical sampling
// with a small mass keeps the token whose surprise is nearest the entropy (here not the likeliest).
TEST(Samplers, TopNSigmaAndTypicalKeepWhatTheyShould) {
  const std::vector<float> spread = {5, 4.9f, 0, 0, 0, 0, 0, 0};
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Config c;
    c.temperature = 1, c.top_k = 0, c.top_p = 1, c.min_p = 0, c.seed = seed, c.top_n_sigma = 0.5f;
    EXPECT_LT(Sampler(c).sample(spread.data(), 8, {}), 2) << "only the two logits within half a deviation of the best";
  }
  const auto l = logits_of({0.6, 0.3, 0.1});  // entropy 0.898; surprises 0.511, 1.204, 2.303
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Config c;
    c.temperature = 1, c.top_k = 0, c.top_p = 1, c.min_p = 0, c.seed = seed, c.typical_p = 0.01f;
    EXPECT_EQ(Sampler(c).sample(l.data(), 3, {}), 1) << "token 1's surprise is nearest the entropy";
  }
}

// Mirostat 2.0: a tiny target surprise keeps only the likeliest token; a large one samples widely.
TEST(Samplers, MirostatSteersTheSurprise) {
  const auto l = logits_of({0.4, 0.3, 0.2, 0.1});
  Config c;
  c.temperature = 1, c.seed = 7, c.mirostat = 2, c.mirostat_tau = 0.01f;
  Sampler tight(c);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(tight.sample(l.data(), 4, {}), 0);
  c.mirostat_tau = 10.0f;
  Sampler loose(c);
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(loose.sample(l.data(), 4, {}));
  EXPECT_EQ(seen.size(), 4u);
}
