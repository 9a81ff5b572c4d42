#include "sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "sampling/json_constraint.hpp"

namespace minfer::sampling {

Sampler::Sampler(const Config &c)
    : cfg_(c), mu_(2.0f * c.mirostat_tau), rng_(c.seed), constraint_(c.constraint ? c.constraint->fresh() : nullptr) {}
Sampler::Sampler(Sampler &&) noexcept = default;
Sampler &Sampler::operator=(Sampler &&) noexcept = default;
Sampler::~Sampler() = default;

namespace {

// The first index of the largest value: eight running maxima (independent lanes the compiler
// keeps in one vector register), then the first position that holds the maximum. A batch of
// 64 sequences argmaxes 64 rows of 152K logits a step; std::max_element's serial chain and
// the copy before it made sampling cost more than the model's step there.
int32_t argmax(const float *x, int64_t n) {
  float lane[8];
  for (float &l : lane) l = -INFINITY;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
  float best = -INFINITY;
  for (float l : lane) best = l > best ? l : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  for (int64_t j = 0; j < n; ++j)
    if (x[j] == best) return int32_t(j);
  return int32_t(std::max_element(x, x + n) - x);  // all NaN or -inf: what max_element picks
}

}  // namespace

std::vector<int32_t> tokens_holding(const std::vector<std::string> &texts, const std::vector<std::string> &strings) {
  std::vector<int32_t> out;
  for (size_t t = 0; t < texts.size(); ++t)
    if (std::any_of(strings.begin(), strings.end(), [&](const std::string &b) { return !b.empty() && texts[t].find(b) != std::string::npos; }))
      out.push_back(int32_t(t));
  return out;
}

TokenLogprobs log_probs(const float *logits, int64_t n, int32_t token, int32_t top) {
  TokenLogprobs r;
  r.token = token;
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  const double log_z = double(mx) + std::log(sum);
  const auto lp = [&](int32_t t) { return float(double(logits[t]) - log_z); };
  r.logprob = token >= 0 && token < n ? lp(token) : -INFINITY;
  if (top > 0) {
    // The n best, ties to the lower id (the arg-max's rule).
    std::vector<int32_t> idx;
    const size_t k = std::min<size_t>(size_t(top), size_t(n));
    idx.reserve(k + 1);
    auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    for (int32_t i = 0; i < int32_t(n); ++i) {  // a bounded heap: one pass, no copy of the row
      if (idx.size() == k && !better(i, idx.front())) continue;
      idx.push_back(i);
      std::push_heap(idx.begin(), idx.end(), better);
      if (idx.size() > k) {
        std::pop_heap(idx.begin(), idx.end(), better);
        idx.pop_back();
      }
    }
    std::sort(idx.begin(), idx.end(), better);
    for (int32_t t : idx) r.top.emplace_back(t, lp(t));
  }
  return r;
}

int32_t Sampler::sample(const float *logits, int64_t n, const std::vector<int32_t> &history) {
  if (greedy()) return argmax(logits, n);  // no copy needed
  work_.assign(logits, logits + n);
  for (const auto &[t, b] : cfg_.logit_bias)
    if (t >= 0 && t < n) work_[size_t(t)] += b;
  const bool counts = cfg_.presence_penalty != 0.0f || cfg_.frequency_penalty != 0.0f;
  if ((cfg_.repeat_penalty != 1.0f || counts) && cfg_.repeat_last_n != 0) {
    const size_t from = cfg_.repeat_last_n < 0 || size_t(cfg_.repeat_last_n) >= history.size()
                            ? 0 : history.size() - size_t(cfg_.repeat_last_n);
    std::unordered_map<int32_t, int32_t> seen;  // token -> times in the window
    for (auto it = history.begin() + long(from); it != history.end(); ++it) ++seen[*it];
    for (const auto &[t, c] : seen) {
      if (t < 0 || t >= n) continue;
      float &l = work_[size_t(t)];
      if (cfg_.repeat_penalty != 1.0f) l = l > 0 ? l / cfg_.repeat_penalty : l * cfg_.repeat_penalty;
      l -= float(c) * cfg_.frequency_penalty + cfg_.presence_penalty;
    }
  }
  if (cfg_.dry_multiplier > 0.0f) dry(history, n);
  if (!constraint_) return choose(n);
  // Constrained: the chain's choice when the constraint allows it, else the chain again over
  // the allowed tokens only (llama.cpp's order for grammars: each allowed token ends up with its
  // probability among the allowed, and most steps test one token, not the vocabulary).
  int32_t t = choose(n);  // reads work_ only: the second pass masks the same logits
  if (!constraint_->allows(t)) {
    constraint_->allowed_all(n, allowed_);
    bool any = false;
    for (int64_t i = 0; i < n; ++i)
      if (!allowed_[size_t(i)]) work_[size_t(i)] = -INFINITY;
      else any = true;
    // Nothing allowed (a schema that contradicts itself): the reply ends here, or, with no end
    // token known, goes on unconstrained. Never a throw: it would end every sequence of the step.
    if (!any) {
      const int32_t end = constraint_->dead_end_token();
      t = end >= 0 && end < n ? end : argmax(logits, n);
    } else {
      t = choose(n);
    }
  }
  constraint_->accept(t);
  return t;
}

bool Sampler::take_argmax(int32_t t) {
  if (!argmax_chain()) return false;
  if (!constraint_) return true;
  if (!constraint_->allows(t)) return false;
  constraint_->accept(t);
  return true;
}

// DRY ("don't repeat yourself", llama.cpp's and koboldcpp's): for each position k of the
// window, the length of the history's end that also ends just before k (a Z-array over the
// reversed window: one pass); the token at k would extend that repeat, so it is penalized by
// the longest such match, counted only back to the last breaker.
void Sampler::dry(const std::vector<int32_t> &history, int64_t n) {
  const size_t len = cfg_.dry_penalty_last_n < 0 || size_t(cfg_.dry_penalty_last_n) >= history.size()
                         ? history.size() : size_t(cfg_.dry_penalty_last_n);
  if (len < 2) return;
  const int32_t *h = history.data() + (history.size() - len);
  const auto breaker = [&](int32_t t) { return std::binary_search(cfg_.dry_breakers.begin(), cfg_.dry_breakers.end(), t); };
  size_t tail = 0;  // tokens at the end since the last breaker: no match reaches further back
  while (tail < len && !breaker(h[len - 1 - tail])) ++tail;
  if (tail == 0) return;
  // z[i]: the longest common prefix of rev and rev[i..], rev the window reversed.
  std::vector<size_t> z(len, 0);
  const auto rev = [&](size_t i) { return h[len - 1 - i]; };
  for (size_t i = 1, l = 0, r = 0; i < len; ++i) {
    if (i < r) z[i] = std::min(r - i, z[i - l]);
    while (i + z[i] < len && rev(z[i]) == rev(i + z[i])) ++z[i];
    if (i + z[i] > r) l = i, r = i + z[i];
  }
  std::unordered_map<int32_t, size_t> longest;  // token -> its longest repeat
  for (size_t k = 1; k < len; ++k) {  // the token at k follows the window's first k tokens
    const size_t match = std::min({z[len - k], tail, k});
    if (match == 0 || breaker(h[k])) continue;
    size_t &m = longest[h[k]];
    m = std::max(m, match);
  }
  for (const auto &[t, m] : longest)
    if (t >= 0 && t < n && m >= size_t(std::max(cfg_.dry_allowed_length, 0)))
      work_[size_t(t)] -= cfg_.dry_multiplier * std::pow(cfg_.dry_base, float(m) - float(cfg_.dry_allowed_length));
}

int32_t Sampler::choose(int64_t n) {
  if (cfg_.temperature <= 0.0f) return argmax(work_.data(), n);

  // top-n-sigma: logits more than n standard deviations below the best never come.
  if (cfg_.top_n_sigma > 0.0f) {
    double sum = 0, sq = 0, best = -INFINITY;
    int64_t live = 0;
    for (int64_t i = 0; i < n; ++i)
      if (std::isfinite(work_[size_t(i)])) sum += work_[size_t(i)], sq += double(work_[size_t(i)]) * work_[size_t(i)], best = std::max(best, double(work_[size_t(i)])), ++live;
    if (live > 1) {
      const double mean = sum / double(live), sd = std::sqrt(std::max(0.0, sq / double(live) - mean * mean)), floor = best - cfg_.top_n_sigma * sd;
      for (int64_t i = 0; i < n; ++i)
        if (work_[size_t(i)] < floor) work_[size_t(i)] = -INFINITY;
    }
  }
  // Candidates, best first; top-k keeps the k best (mirostat: all, it truncates by surprise).
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  const size_t k = cfg_.top_k > 0 && cfg_.mirostat == 0 ? std::min<size_t>(size_t(cfg_.top_k), idx.size()) : idx.size();
  auto better = [&](int32_t a, int32_t b) { return work_[size_t(a)] > work_[size_t(b)] || (work_[size_t(a)] == work_[size_t(b)] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(), better);
  idx.resize(k);
  // Softmax at the temperature.
  std::vector<double> p(k);
  const double mx = work_[size_t(idx[0])];
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp((double(work_[size_t(idx[i])]) - mx) / cfg_.temperature);
  for (double &x : p) x /= sum;
  size_t keep = k;
  while (keep > 1 && p[keep - 1] == 0.0) --keep;  // -inf logits (top-n-sigma's, a constraint's)
  if (cfg_.mirostat == 2) {
    // Mirostat 2.0: the tokens whose surprise (-log2 p) is below mu, at least one; mu moves by
    // eta toward the target surprise tau after each token.
    size_t m = 1;
    while (m < keep && -std::log2(p[m]) <= double(mu_)) ++m;
    double mass = 0;
    for (size_t i = 0; i < m; ++i) mass += p[i];
    std::discrete_distribution<size_t> pick(p.begin(), p.begin() + long(m));
    const size_t c = pick(rng_);
    mu_ -= cfg_.mirostat_eta * float(-std::log2(p[c] / mass) - double(cfg_.mirostat_tau));
    return idx[c];
  }
  // Locally typical: the tokens whose surprise is nearest the entropy, up to typical_p of the
  // mass (kept in order of probability).
  if (cfg_.typical_p < 1.0f) {
    double entropy = 0;
    for (size_t i = 0; i < keep; ++i)
      if (p[i] > 0) entropy -= p[i] * std::log(p[i]);
    std::vector<size_t> by(keep);
    std::iota(by.begin(), by.end(), size_t(0));
    const auto off = [&](size_t i) { return std::fabs(-std::log(p[i]) - entropy); };
    std::stable_sort(by.begin(), by.end(), [&](size_t a, size_t b) { return off(a) < off(b); });
    double cum = 0;
    size_t taken = 0;
    while (taken < keep && (taken == 0 || cum < cfg_.typical_p)) cum += p[by[taken++]];
    std::vector<uint8_t> in(keep, 0);
    for (size_t i = 0; i < taken; ++i) in[by[i]] = 1;
    for (size_t i = 0; i < keep; ++i)
      if (!in[i]) p[i] = 0;
  }
  // top-p: the smallest prefix whose mass reaches top_p; min-p: drop the unlikely tail.
  if (cfg_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i)
      if ((cum += p[i]) >= cfg_.top_p) {
        keep = i + 1;
        break;
      }
  }
  if (cfg_.min_p > 0.0f)
    while (keep > 1 && p[keep - 1] < cfg_.min_p * p[0]) --keep;
  // XTC ("exclude top choices"): sometimes every token at or above the threshold but the least
  // likely of them goes, where at least two are there.
  if (cfg_.xtc_probability > 0.0f && std::uniform_real_distribution<float>(0.0f, 1.0f)(rng_) < cfg_.xtc_probability) {
    size_t above = 0;
    while (above < keep && p[above] >= cfg_.xtc_threshold) ++above;
    for (size_t i = 0; above >= 2 && i + 1 < above; ++i) p[i] = 0;
  }
  std::discrete_distribution<size_t> pick(p.begin(), p.begin() + long(keep));
  return idx[pick(rng_)];
}

}  // namespace minfer::sampling
