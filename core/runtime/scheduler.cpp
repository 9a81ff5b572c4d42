#include "runtime/scheduler.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace minfer::sched {

Scheduler::Scheduler(kv::PagePool &pool, SchedulerLimits limits) : pool_(pool), lim_(limits) {
  if (lim_.batch_tokens <= 0 || lim_.max_seqs <= 0 || lim_.n_ctx <= 0)
    throw Error("scheduler: batch, slots and context must be positive");
}

std::string Scheduler::why_never(const Request &r) const {
  if (r.prompt.empty()) return "the prompt is empty";
  if (r.max_tokens < 1) return "max_tokens must be at least 1";
  const int64_t need = int64_t(r.prompt.size()) + r.max_tokens;
  if (need > lim_.n_ctx)
    return "its prompt of " + std::to_string(r.prompt.size()) + " tokens and " + std::to_string(r.max_tokens) + " tokens to generate need " +
           std::to_string(need) + " positions; the context holds " + std::to_string(lim_.n_ctx);
  if (pool_.pages_for(need) > pool_.n_pages())
    return "it needs " + std::to_string(pool_.pages_for(need)) + " KV pages; the whole pool has " + std::to_string(pool_.n_pages());
  return "";
}

void Scheduler::submit(Request r) {
  const std::string what = "request " + std::to_string(r.id);
  if (const std::string why = why_never(r); !why.empty()) throw Error(what + ": " + why);
  if (running_.count(r.id) || std::any_of(queue_.begin(), queue_.end(), [&](const Seq &s) { return s.req.id == r.id; }))
    throw Error(what + " is queued or running already");
  Seq s;
  s.req = std::move(r);
  queue_.push_back(std::move(s));
}

void Scheduler::finish(int64_t id, const std::string &reason) {
  auto it = running_.find(id);
  pool_.close(id);
  finished_.push_back({id, std::move(it->second.generated), reason, std::max<int64_t>(0, it->second.cached)});
  running_.erase(it);
}

void Scheduler::cancel(int64_t id) {
  if (running_.count(id)) return finish(id, "cancelled");
  for (auto it = queue_.begin(); it != queue_.end(); ++it)
    if (it->req.id == id) {
      finished_.push_back({id, std::move(it->generated), "cancelled", std::max<int64_t>(0, it->cached)});
      queue_.erase(it);
      return;
    }
}

void Scheduler::preempt_newest(StepPlan &plan) {
  auto newest = running_.begin();
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if (it->second.order > newest->second.order) newest = it;
  Seq s = std::move(newest->second);
  pool_.close(s.req.id);
  s.computed = 0;  // recomputed from its tokens when it is admitted again
  plan.preempted.push_back(s.req.id);
  std::erase_if(plan.items, [&](const StepItem &i) { return i.seq == s.req.id; });
  running_.erase(newest);
  queue_.push_front(std::move(s));
  ++preemptions_;
}

StepPlan Scheduler::plan() {
  StepPlan plan;
  int64_t budget = lim_.batch_tokens;
  int64_t rows_left = lim_.max_rows > 0 ? lim_.max_rows : lim_.max_seqs;  // logit rows the step has left
  // How many of the next n tokens of s (from s.computed) a step may take with the rows left:
  // a chunk that ends the prompt takes a row, and with prompt_rows each position before the
  // prompt's last takes one; 0 when not even one token fits.
  const auto fit = [&](const Seq &s, int64_t n) -> int64_t {
    const int64_t last = int64_t(s.req.prompt.size()) - 1;  // the prompt's last position
    const auto rows = [&](int64_t m) {
      const int64_t prompt = s.req.prompt_rows ? std::clamp<int64_t>(std::min(s.computed + m, last) - s.computed, 0, m) : 0;
      return prompt + (s.computed + m == s.length() ? 1 : 0);
    };
    while (n > 0 && rows(n) > rows_left) n = s.req.prompt_rows ? std::min(n - 1, rows_left) : n - 1;
    return n;
  };
  auto by_age = [&] {
    std::vector<int64_t> ids;
    for (const auto &[id, s] : running_) ids.push_back(id);
    std::sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return running_.at(a).order < running_.at(b).order; });
    return ids;
  };
  auto add = [&](Seq &s, int64_t n) {
    StepItem item;
    item.seq = s.req.id;
    item.pos = s.computed;
    for (int64_t i = 0; i < n; ++i) item.tokens.push_back(s.token(s.computed + i));
    item.wants_logits = s.computed + n == s.length();
    if (s.req.prompt_rows)
      item.prompt_rows = std::clamp<int64_t>(std::min(s.computed + n, int64_t(s.req.prompt.size()) - 1) - s.computed, 0, n);
    plan.n_tokens += n;
    budget -= n;
    rows_left -= item.rows();
    plan.items.push_back(std::move(item));
  };
  // 1. One token for each decoding sequence, oldest first; a page it needs comes from the
  // newest running sequence when the pool is dry (possibly itself).
  for (int64_t id : by_age()) {
    if (budget == 0) break;
    auto it = running_.find(id);
    if (it == running_.end() || it->second.length() - it->second.computed != 1) continue;
    bool ok = true;
    while (!pool_.reserve(id, it->second.computed + 1)) {
      const bool self = std::all_of(running_.begin(), running_.end(), [&](const auto &kv) { return kv.second.order <= it->second.order; });
      preempt_newest(plan);
      if (self) {
        ok = false;
        break;
      }
    }
    if (ok) add(running_.at(id), 1);
  }
  // 2. Prefill chunks of running sequences still reading their tokens.
  for (int64_t id : by_age()) {
    if (budget == 0) break;
    Seq &s = running_.at(id);
    const int64_t left = s.length() - s.computed;
    if (left <= 1) continue;  // one token left: it ran above
    if (std::any_of(plan.items.begin(), plan.items.end(), [&](const StepItem &i) { return i.seq == id; })) continue;
    const int64_t n = fit(s, std::min(left, budget));
    if (n > 0 && pool_.reserve(id, s.computed + n)) add(s, n);
  }
  // 3. Admit waiting requests while the budget, the slots and the pages allow.
  while (budget > 0 && !queue_.empty() && int64_t(running_.size()) < lim_.max_seqs) {
    Seq &s = queue_.front();
    std::vector<int32_t> all;
    for (int64_t i = 0; i < s.length(); ++i) all.push_back(s.token(i));
    // A scored prompt (prompt_rows) computes every position: its logits are the point, so it
    // shares no cached pages (opened with its first token only, nothing matches).
    const int64_t reused = pool_.open(s.req.id, s.req.prompt_rows ? std::span<const int32_t>(all.data(), std::min<size_t>(all.size(), 1))
                                                                  : std::span<const int32_t>(all));
    const int64_t computed = s.computed;
    s.computed = reused;  // where its chunk starts, for fit()
    const int64_t n = fit(s, std::min(s.length() - reused, budget));
    s.computed = computed;
    if (n == 0 || !pool_.reserve(s.req.id, reused + n)) {
      pool_.close(s.req.id);
      break;  // the pool is full: the queue waits
    }
    s.computed = reused;
    s.order = next_order_++;
    if (s.cached < 0) s.cached = reused;
    reused_ += reused;
    const int64_t id = s.req.id;
    running_.emplace(id, std::move(s));
    queue_.pop_front();
    add(running_.at(id), n);
  }
  return plan;
}

void Scheduler::complete(const StepPlan &plan, const std::vector<int32_t> &sampled, const std::function<bool(int32_t)> &is_end) {
  size_t k = 0;
  for (const StepItem &item : plan.items) {
    auto it = running_.find(item.seq);
    if (it == running_.end()) continue;  // cancelled meanwhile
    Seq &s = it->second;
    pool_.commit(item.seq, item.tokens);
    s.computed += int64_t(item.tokens.size());
    if (!item.wants_logits) continue;
    if (k >= sampled.size()) throw Error("scheduler: fewer sampled tokens than items that wanted them");
    const int32_t t = sampled[k++];
    if (is_end && is_end(t)) {
      finish(item.seq, "stop");
      continue;
    }
    s.generated.push_back(t);
    if (int64_t(s.generated.size()) >= s.req.max_tokens || s.length() >= lim_.n_ctx) finish(item.seq, "length");
  }
}

std::vector<Finished> Scheduler::take_finished() {
  std::vector<Finished> out = std::move(finished_);
  finished_.clear();
  return out;
}

}  // namespace minfer::sched
