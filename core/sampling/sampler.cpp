#include "sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "sampling/json_constraint.hpp"

namespace minfer::sampling {

Sampler::Sampler(const Config &c) : cfg_(c), rng_(c.seed), constraint_(c.constraint ? c.constraint->fresh() : nullptr) {}
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

int32_t Sampler::choose(int64_t n) {
  if (cfg_.temperature <= 0.0f) return argmax(work_.data(), n);

  // Candidates, best first; top-k keeps the k best.
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  const size_t k = cfg_.top_k > 0 ? std::min<size_t>(size_t(cfg_.top_k), idx.size()) : idx.size();
  auto better = [&](int32_t a, int32_t b) { return work_[size_t(a)] > work_[size_t(b)] || (work_[size_t(a)] == work_[size_t(b)] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(), better);
  idx.resize(k);
  // Softmax at the temperature.
  std::vector<double> p(k);
  const double mx = work_[size_t(idx[0])];
  double sum = 0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp((double(work_[size_t(idx[i])]) - mx) / cfg_.temperature);
  for (double &x : p) x /= sum;
  // top-p: the smallest prefix whose mass reaches top_p; min-p: drop the unlikely tail.
  size_t keep = k;
  if (cfg_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < k; ++i)
      if ((cum += p[i]) >= cfg_.top_p) {
        keep = i + 1;
        break;
      }
  }
  if (cfg_.min_p > 0.0f)
    while (keep > 1 && p[keep - 1] < cfg_.min_p * p[0]) --keep;
  std::discrete_distribution<size_t> pick(p.begin(), p.begin() + long(keep));
  return idx[pick(rng_)];
}

}  // namespace minfer::sampling
