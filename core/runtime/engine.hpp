// core/runtime/engine.hpp — one thread that owns a BatchSession and runs its steps back to
// back, for callers on other threads (the server's connections; SERVING.md).
//
// Requests arrive through a thread-safe inbox and leave through their own streams: each
// sampled token, then one end event with the finish reason. Between steps the thread admits
// what arrived and applies cancellations (a client that went away: its pages return at once).
// A bounded inbox refuses work beyond it (the server answers 503). Nothing here knows HTTP.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/batch_session.hpp"

namespace minfer {

// What a request's stream carries: tokens, then exactly one end.
struct EngineEvent {
  bool end = false;
  int32_t token = 0;    // when !end
  std::string reason;   // when end: "length", "stop" (end of generation), "cancelled", or "error: ..."
  int64_t cached = 0;   // when end: prompt positions found in shared KV pages (prefix reuse)
  std::optional<sampling::TokenLogprobs> logprobs;  // with a token, when the request asked for them
  std::vector<float> embedding;  // an embed request's (SeqRequest::embed), in place of a token (-1)
  bool prompt = false;  // a prompt token's log-probability (SeqRequest::prompt_logprobs), not a generated token
};

// One request's stream, written by the engine thread, read by its caller.
class RequestStream {
 public:
  // The next event, waiting up to timeout_ms for one (nullopt when none came).
  std::optional<EngineEvent> next(int64_t timeout_ms);
  void push(EngineEvent e);

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<EngineEvent> events_;
};

struct EngineLimits {
  size_t max_waiting = 256;  // requests accepted but not yet running, at most
};

class Engine {
 public:
  // model/session as BatchSession takes them; the engine's thread starts here. They must
  // outlive the engine.
  Engine(const models::Model &model, Session &session, std::function<bool(int32_t)> is_end, EngineLimits limits = {});
  ~Engine();  // cancels what is left and joins the thread
  Engine(const Engine &) = delete;
  Engine &operator=(const Engine &) = delete;

  // Why the request can never run ("" when it can): an empty prompt, or prompt + max_tokens
  // beyond the context or the pool. Any thread; nothing is queued.
  std::string check(const SeqRequest &r) const;
  // Queues a request (its id unique among those not ended); returns its stream, or nullptr
  // when the inbox is full (overloaded) or the engine is stopping. A request check() refuses
  // is accepted and ends at once with "error: ...".
  std::shared_ptr<RequestStream> submit(SeqRequest r);
  // Ends a request wherever it is; its stream gets the end event "cancelled".
  void cancel(int64_t id);

  struct Stats {
    int64_t waiting = 0, running = 0, steps = 0, generated = 0, preemptions = 0, reused_positions = 0;
    int64_t prefill_tokens = 0, decode_tokens = 0;  // run through the model (prefill: prompts and recomputed positions)
    double prefill_step_s = 0, decode_step_s = 0;   // BatchStats' seconds of the steps that carried them
    int64_t argmax_rows = 0, logit_rows = 0;        // BatchStats': sampled rows from the arg-max, from read logits
    kv::PoolStats pool;
  };
  Stats stats() const;  // any thread; as of the last step

 private:
  void loop();

  EngineLimits limits_;
  BatchSession batch_;  // the engine thread's alone
  mutable std::mutex m_;
  std::condition_variable wake_;
  std::vector<std::pair<SeqRequest, std::shared_ptr<RequestStream>>> inbox_;
  std::vector<int64_t> cancels_;
  std::map<int64_t, std::shared_ptr<RequestStream>> streams_;  // not ended yet (queued or running)
  Stats stats_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace minfer
