// core/runtime/scheduler.hpp — continuous batching (SERVING.md): which tokens of which
// sequences the next step runs, over a paged KV cache.
//
// Each step: every running sequence that is decoding gets its one token first (latency),
// then prefill chunks of sequences still reading their prompt, then new requests are
// admitted while the step's token budget, the slots and the free pages allow. When a
// decoding sequence needs a page and none is free, the newest running sequence is preempted:
// its pages go back and it waits at the front of the queue to be recomputed (its prompt and
// the tokens it generated so far), so no request is lost and none is duplicated.
//
// It knows pages, tokens and requests; it knows nothing of kernels (the batched session runs
// a plan) and nothing of HTTP (the server submits and reads results).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/page_pool.hpp"

namespace minfer::sched {

struct Request {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;  // tokens to generate at most
  // Rows of logits for the prompt's positions too (each predicts the next prompt token: the
  // prompt's log-probabilities); its prompt chunks are then cut to the rows a step has left.
  bool prompt_rows = false;
};

// One sequence's part of a step: its tokens at positions pos, pos+1, ...
struct StepItem {
  int64_t seq = 0;
  int64_t pos = 0;
  std::vector<int32_t> tokens;
  bool wants_logits = false;  // the last token of a prompt, or a decode token: sample after it
  // Request::prompt_rows: how many leading tokens of this item are prompt positions whose
  // row is read for the next prompt token's log-probability (positions before the prompt's last).
  int64_t prompt_rows = 0;
  int64_t rows() const { return prompt_rows + (wants_logits ? 1 : 0); }  // logit rows the item takes
};

struct StepPlan {
  std::vector<StepItem> items;
  std::vector<int64_t> preempted;  // sequences sent back to the queue by this plan
  int64_t n_tokens = 0;
  bool empty() const { return items.empty(); }
};

struct Finished {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // the generated tokens (the end-of-generation one not included)
  std::string reason;           // "length", "stop" (end of generation), "cancelled"
  int64_t cached = 0;           // prompt positions it found in shared pages when first admitted
};

struct SchedulerLimits {
  int64_t batch_tokens = 512;  // tokens one step carries at most
  int64_t max_seqs = 64;       // sequences running at once (slots)
  int64_t n_ctx = 4096;        // positions one sequence may hold
  int64_t max_rows = 0;        // logit rows one step holds (0: max_seqs, one for each sequence)
};

class Scheduler {
 public:
  Scheduler(kv::PagePool &pool, SchedulerLimits limits);

  // Why a request can never run ("" when it can): an empty prompt, max_tokens below 1, or
  // prompt + max_tokens beyond the context or the whole pool. Reads only what never changes
  // after construction, so another thread may ask while steps run (the engine does).
  std::string why_never(const Request &r) const;
  // Queues a request. Throws minfer::Error naming it when why_never refuses it.
  void submit(Request r);
  // Ends a request wherever it is (queued or running); its pages return at once.
  void cancel(int64_t id);

  // The next step. Empty when nothing is queued or running.
  StepPlan plan();
  // After the step ran: `sampled[i]` is the token sampled for the i-th item that wanted
  // logits (in plan order). A token that `is_end` says ends generation finishes its sequence.
  void complete(const StepPlan &plan, const std::vector<int32_t> &sampled, const std::function<bool(int32_t)> &is_end);

  // Requests finished since the last call, in the order they finished.
  std::vector<Finished> take_finished();

  size_t waiting() const { return queue_.size(); }
  size_t running() const { return running_.size(); }
  int64_t preemptions() const { return preemptions_; }
  // Positions reused from the pool's shared pages when sequences opened (prefix reuse).
  int64_t reused_positions() const { return reused_; }

 private:
  struct Seq {
    Request req;
    std::vector<int32_t> generated;
    int64_t computed = 0;  // positions in the KV cache
    int64_t order = 0;     // admission order: the newest is preempted first
    int64_t cached = -1;   // positions reused at its first admission (-1: not admitted yet)
    // Every token of the sequence: the prompt, then what it generated.
    int64_t length() const { return int64_t(req.prompt.size() + generated.size()); }
    int32_t token(int64_t i) const {
      return i < int64_t(req.prompt.size()) ? req.prompt[size_t(i)] : generated[size_t(i - int64_t(req.prompt.size()))];
    }
  };

  void preempt_newest(StepPlan &plan);
  void finish(int64_t id, const std::string &reason);

  kv::PagePool &pool_;
  SchedulerLimits lim_;
  std::deque<Seq> queue_;          // waiting, in arrival order (preempted ones in front)
  std::map<int64_t, Seq> running_;  // by request id
  std::vector<Finished> finished_;
  int64_t next_order_ = 0, preemptions_ = 0, reused_ = 0;
};

}  // namespace minfer::sched
