#include "runtime/batch_session.hpp"

#include <algorithm>
#include <chrono>

#include "common/error.hpp"
#include "common/parallel.hpp"

namespace minfer {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

BatchSession::BatchSession(const models::Model &model, Session &session, std::function<bool(int32_t)> is_end)
    : model_(model),
      session_(session),
      is_end_(std::move(is_end)),
      pool_(int32_t(model.opts.kv_pages), model.opts.page_size),
      sched_(pool_, {model.opts.max_batch, model.opts.max_seqs, model.opts.n_ctx, model.opts.max_outputs()}),
      slot_owner_(size_t(model.opts.max_seqs), -1) {
  if (model.opts.all_logits) throw Error("the batched session reads one row of logits per sequence; build the model without all_logits");
  table_.assign(size_t(model.opts.pages_per_seq() * model.opts.max_seqs), 0);
}

void BatchSession::submit(SeqRequest r) {
  if (seqs_.count(r.id)) throw Error("request " + std::to_string(r.id) + " is queued or running already");
  if (r.embed && !session_.has_output(models::Model::kHidden))
    throw Error("request " + std::to_string(r.id) + " asks for an embedding, but the model was built without its hidden states "
                "(BuildOptions::embeddings; minfer-server --embeddings)");
  if (r.embed) r.max_tokens = 1, r.sampling = sampling::Config{}, r.sampling.temperature = 0;  // the token is not kept
  if (r.embed && r.prompt_logprobs >= 0) throw Error("request " + std::to_string(r.id) + " asks for an embedding and the prompt's log-probabilities");
  Seq s{sampling::Sampler(r.sampling), r.prompt, -1, r.logprobs, r.embed, r.prompt_logprobs, 0, int64_t(r.prompt.size())};
  sched_.submit({r.id, std::move(r.prompt), r.max_tokens, r.prompt_logprobs >= 0});
  seqs_.emplace(r.id, std::move(s));
}

void BatchSession::cancel(int64_t id) {
  sched_.cancel(id);
  for (sched::Finished &f : sched_.take_finished()) {
    release_slot(f.id);
    seqs_.erase(f.id);
    finished_.push_back(std::move(f));
  }
}

int32_t BatchSession::slot_for(int64_t id) {
  Seq &s = seqs_.at(id);
  if (s.slot >= 0) return s.slot;
  const auto free = std::find(slot_owner_.begin(), slot_owner_.end(), int64_t(-1));
  if (free == slot_owner_.end()) throw Error("internal: the scheduler ran more sequences than the model has slots");
  *free = id;
  return s.slot = int32_t(free - slot_owner_.begin());
}

void BatchSession::release_slot(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.slot < 0) return;
  slot_owner_[size_t(it->second.slot)] = -1;
  it->second.slot = -1;
}

std::vector<SeqToken> BatchSession::step() {
  const sched::StepPlan plan = sched_.plan();
  for (int64_t id : plan.preempted) release_slot(id);  // recomputed later, in whatever slot is free then
  if (plan.empty()) return {};
  tokens_.clear(), positions_.clear(), slots_.clear(), rows_.clear(), row_of_.clear();
  const int64_t width = model_.opts.pages_per_seq(), prefill_before = stats_.prefill_tokens;
  int64_t sampled_items = 0, max_positions = 0;
  for (const sched::StepItem &item : plan.items) {
    max_positions = std::max(max_positions, item.pos + int64_t(item.tokens.size()));
    const int32_t slot = slot_for(item.seq);
    const int64_t first = int64_t(tokens_.size());
    for (size_t i = 0; i < item.tokens.size(); ++i) {
      tokens_.push_back(item.tokens[i]);
      positions_.push_back(int32_t(item.pos + int64_t(i)));
      slots_.push_back(slot);
    }
    for (int64_t i = 0; i < item.prompt_rows; ++i) rows_.push_back(int32_t(first + i)), row_of_.push_back({-1, item.seq, item.pos + i});
    if (item.wants_logits) rows_.push_back(int32_t(tokens_.size() - 1)), row_of_.push_back({sampled_items++, 0, 0});
    const std::vector<kv::PageId> &pages = pool_.pages(item.seq);
    std::copy(pages.begin(), pages.end(), table_.begin() + int64_t(slot) * width);
    (item.tokens.size() == 1 && item.pos + 1 == int64_t(seqs_.at(item.seq).history.size()) ? stats_.decode_tokens
                                                                                          : stats_.prefill_tokens) += int64_t(item.tokens.size());
  }
  const int64_t n = int64_t(tokens_.size()), outputs = int64_t(rows_.size());
  session_.set_input(models::Model::kTokens, tokens_.data(), uint64_t(n) * 4);
  session_.set_input(models::Model::kPositions, positions_.data(), uint64_t(n) * 4);
  session_.set_input(models::Model::kSlots, slots_.data(), uint64_t(n) * 4);
  session_.set_input(models::Model::kPageTable, table_.data(), table_.size() * 4);
  // A step of prompt chunks that end no prompt still computes one row (the graph always has
  // its output head); its logits are not read.
  if (outputs == 0) rows_.push_back(0);
  session_.set_input(models::Model::kLogitRows, rows_.data(), rows_.size() * 4);
  // The backend's arg-max rows, where some sampled row may take its own (greedy, no logprobs):
  // asked for before the step, so they come back in the step's own wait.
  bool argmax_wanted = false;
  if (outputs > 0 && !on_logits_ && session_.has_output(models::Model::kGreedy))
    for (const sched::StepItem &item : plan.items) {
      const Seq &q = seqs_.at(item.seq);
      argmax_wanted = argmax_wanted || (item.wants_logits && q.sampler.argmax_chain() && q.logprobs < 0);
    }
  if (argmax_wanted) {
    if (argmax_.size() < uint64_t(outputs) * 4)  // doubling: the backend's own memory is slow to get
      argmax_ = session_.output_host_memory(models::Model::kGreedy, std::max(uint64_t(outputs) * 4, 2 * argmax_.size()));
    session_.read_output_after_next_run(models::Model::kGreedy, argmax_.data(), uint64_t(outputs) * 4);
  }
  auto t0 = Clock::now();
  const int64_t prefill_here = stats_.prefill_tokens - prefill_before, decode_here = n - prefill_here;
  session_.run({n, 0, int64_t(rows_.size()), int64_t(plan.items.size()), max_positions});
  const double took = seconds_since(t0);
  stats_.run_s += took;
  if (prefill_here > 0) stats_.prefill_step_s += took;
  if (decode_here > 0) stats_.decode_step_s += took;
  ++stats_.steps;
  stats_.most_seqs = std::max<int64_t>(stats_.most_seqs, int64_t(plan.items.size()));

  std::vector<int32_t> sampled;
  std::vector<SeqToken> out;
  // Embed requests: their rows of the final norm instead of a token (the token sampled for them
  // below only ends them: max_tokens is 1).
  bool embeds = false;
  for (const sched::StepItem &item : plan.items) embeds = embeds || (item.wants_logits && seqs_.at(item.seq).embed);
  if (embeds) {
    hidden_.resize(session_.output_bytes(models::Model::kHidden) / 4);
    session_.read_output(models::Model::kHidden, hidden_.data(), hidden_.size() * 4);
    const int64_t width = int64_t(hidden_.size()) / outputs;
    int64_t k = 0;
    for (const sched::StepItem &item : plan.items) {
      k += item.prompt_rows;  // prompt rows come before an item's own
      if (!item.wants_logits) continue;
      const float *row = hidden_.data() + k++ * width;
      if (seqs_.at(item.seq).embed) out.push_back({item.seq, -1, std::nullopt, std::vector<float>(row, row + width)});
    }
  }
  // The sampled rows, in plan order. A row whose chain is the plain arg-max (greedy, also under
  // a constraint, which may refuse it) takes the backend's arg-max, a few bytes; only the
  // others, and those a constraint refused, read their logits rows (a row is the vocabulary:
  // 600 KB for 152k tokens, so one constrained or sampled request costs the step one row, not
  // every row).
  std::vector<Seq *> seq_of;
  std::vector<int64_t> id_of;
  for (const sched::StepItem &item : plan.items)
    if (item.wants_logits) seq_of.push_back(&seqs_.at(item.seq)), id_of.push_back(item.seq);
  std::vector<size_t> sample_row(seq_of.size());  // each sampled item's output row
  bool prompt_rows = false;
  for (size_t r = 0; r < row_of_.size(); ++r) {
    if (row_of_[r].item >= 0) sample_row[size_t(row_of_[r].item)] = r;
    else prompt_rows = true;
  }
  sampled.assign(seq_of.size(), -1);
  std::vector<size_t> need;  // sampled items whose logits rows are read
  if (outputs > 0 && !on_logits_ && session_.has_output(models::Model::kGreedy)) {
    const int32_t *argmax = static_cast<const int32_t *>(argmax_.data());
    for (size_t i = 0; i < seq_of.size(); ++i) {
      Seq &q = *seq_of[i];
      if (argmax_wanted && q.logprobs < 0 && q.sampler.take_argmax(argmax[sample_row[i]])) sampled[i] = argmax[sample_row[i]];
      else need.push_back(i);
    }
  } else if (outputs > 0) {
    for (size_t i = 0; i < seq_of.size(); ++i) need.push_back(i);
  }
  stats_.argmax_rows += int64_t(seq_of.size() - need.size());
  stats_.logit_rows += int64_t(need.size());
  if (outputs > 0 && need.empty() && !prompt_rows) ++stats_.greedy_steps;
  std::vector<std::optional<sampling::TokenLogprobs>> logprobs(seq_of.size());
  if (!need.empty() || prompt_rows) {
    t0 = Clock::now();
    // The rows read: the sampled ones that need them and every prompt row, in row order.
    std::vector<size_t> read;
    for (size_t i : need) read.push_back(sample_row[i]);
    for (size_t r = 0; r < row_of_.size(); ++r)
      if (row_of_[r].item < 0) read.push_back(r);
    std::sort(read.begin(), read.end());
    std::vector<int64_t> at(size_t(outputs), -1);  // a read row's place in logits_
    for (size_t j = 0; j < read.size(); ++j) at[read[j]] = int64_t(j);
    const int64_t vocab = int64_t(session_.output_bytes(models::Model::kLogits) / 4) / outputs;
    const uint64_t read_bytes = uint64_t(read.size()) * uint64_t(vocab) * 4;
    if (logits_.size() < read_bytes)  // doubling: page-locked memory is slow to get (milliseconds)
      logits_ = session_.output_host_memory(models::Model::kLogits, std::max(read_bytes, 2 * logits_.size()));
    float *const logits = static_cast<float *>(logits_.data());
    if (int64_t(read.size()) == outputs) {
      session_.read_output(models::Model::kLogits, logits, read_bytes);
    } else {
      for (size_t j = 0; j < read.size();) {  // runs of consecutive rows, one read each
        size_t e = j + 1;
        while (e < read.size() && read[e] == read[e - 1] + 1) ++e;
        session_.read_output_rows(models::Model::kLogits, int64_t(read[j]), int64_t(e - j), logits + int64_t(j) * vocab);
        j = e;
      }
    }
    stats_.logits_s += seconds_since(t0);
    t0 = Clock::now();
    const auto row = [&](size_t r) { return logits + at[r] * vocab; };
    if (on_logits_)
      for (size_t i : need) on_logits_(id_of[i], {row(sample_row[i]), size_t(vocab)});
    // Each sequence samples its own row; many rows are sampled on several threads (a sampler
    // and its history belong to one sequence, so the rows are independent).
    parallel_ranges(int64_t(need.size()), need.size() >= 8 ? std::min(8, resolve_threads(0)) : 1, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) {
        const size_t i = need[size_t(j)];
        Seq &q = *seq_of[i];
        const float *lr = row(sample_row[i]);
        sampled[i] = q.sampler.sample(lr, vocab, q.history);
        if (q.logprobs >= 0) logprobs[i] = sampling::log_probs(lr, vocab, sampled[i], q.logprobs);
      }
    });
    // The prompt's log-probabilities: the row at position p gives prompt token p + 1's, each
    // once (a preempted sequence computes its prompt again).
    for (size_t r = 0; r < row_of_.size(); ++r) {
      if (row_of_[r].item >= 0) continue;
      Seq &q = seqs_.at(row_of_[r].seq);
      const int64_t p = row_of_[r].pos;
      if (p != q.prompt_done || p + 1 >= q.prompt_size) continue;
      const int32_t next = q.history[size_t(p + 1)];
      out.push_back({row_of_[r].seq, next, sampling::log_probs(row(r), vocab, next, q.prompt_logprobs), {}, true});
      q.prompt_done = p + 1;
    }
    stats_.sample_s += seconds_since(t0);
  }
  for (size_t i = 0; i < seq_of.size(); ++i) {
    const int32_t t = sampled[i];
    if ((is_end_ && is_end_(t)) || seq_of[i]->embed) continue;
    seq_of[i]->history.push_back(t);
    out.push_back({id_of[i], t, std::move(logprobs[i])});
  }
  sched_.complete(plan, sampled, is_end_);
  for (sched::Finished &f : sched_.take_finished()) {
    release_slot(f.id);
    seqs_.erase(f.id);
    finished_.push_back(std::move(f));
  }
  return out;
}

std::vector<sched::Finished> BatchSession::take_finished() {
  std::vector<sched::Finished> r = std::move(finished_);
  finished_.clear();
  return r;
}

}  // namespace minfer
