#include "runtime/engine.hpp"

#include <algorithm>
#include <chrono>

#include "common/error.hpp"

namespace minfer {

std::optional<EngineEvent> RequestStream::next(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(m_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); })) return std::nullopt;
  EngineEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestStream::push(EngineEvent e) {
  {
    std::lock_guard<std::mutex> lock(m_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

Engine::Engine(const models::Model &model, Session &session, std::function<bool(int32_t)> is_end, EngineLimits limits)
    : limits_(limits), batch_(model, session, std::move(is_end)) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::string Engine::check(const SeqRequest &r) const {
  return batch_.scheduler().why_never({r.id, r.prompt, r.max_tokens});  // it reads nothing a step changes
}

std::shared_ptr<RequestStream> Engine::submit(SeqRequest r) {
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_ || inbox_.size() + size_t(stats_.waiting) >= limits_.max_waiting) return nullptr;
    if (streams_.count(r.id)) throw Error("request " + std::to_string(r.id) + " is queued or running already");
    streams_[r.id] = stream;
    inbox_.emplace_back(std::move(r), stream);
  }
  wake_.notify_all();
  return stream;
}

void Engine::cancel(int64_t id) {
  {
    std::lock_guard<std::mutex> lock(m_);
    cancels_.push_back(id);
  }
  wake_.notify_all();
}

Engine::Stats Engine::stats() const {
  std::lock_guard<std::mutex> lock(m_);
  return stats_;
}

void Engine::loop() {
  std::map<int64_t, std::shared_ptr<RequestStream>> mine;  // the engine thread's view of the streams
  auto end = [&](int64_t id, const std::string &reason, int64_t cached = 0) {
    auto it = mine.find(id);
    if (it == mine.end()) return;
    it->second->push({true, 0, reason, cached});
    mine.erase(it);
    std::lock_guard<std::mutex> lock(m_);
    streams_.erase(id);
  };
  for (;;) {
    std::vector<std::pair<SeqRequest, std::shared_ptr<RequestStream>>> arrived;
    std::vector<int64_t> cancels;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(m_);
      wake_.wait(lock, [&] { return stopping_ || !inbox_.empty() || !cancels_.empty() || !batch_.idle(); });
      arrived.swap(inbox_);
      cancels.swap(cancels_);
      stopping = stopping_;
    }
    for (auto &[req, stream] : arrived) {
      const int64_t id = req.id;
      mine[id] = stream;
      if (const std::string why = check(req); !why.empty()) {
        end(id, "error: " + why);
        continue;
      }
      try {
        batch_.submit(std::move(req));
      } catch (const std::exception &e) {
        end(id, std::string("error: ") + e.what());
      }
    }
    if (stopping)
      for (const auto &[id, stream] : mine) cancels.push_back(id);
    for (int64_t id : cancels)
      if (mine.count(id)) batch_.cancel(id);
    std::vector<SeqToken> tokens;
    try {
      tokens = batch_.step();
    } catch (const std::exception &e) {  // a backend failure ends everything in flight, named
      for (auto it = mine.begin(); it != mine.end();) {
        const int64_t id = (it++)->first;
        batch_.cancel(id);
        end(id, std::string("error: ") + e.what());
      }
      batch_.take_finished();
    }
    const std::vector<sched::Finished> finished = batch_.take_finished();
    {  // before the streams hear of this step: a caller that saw its end sees these figures
      std::lock_guard<std::mutex> lock(m_);
      const BatchStats &b = batch_.stats();
      stats_.waiting = int64_t(batch_.scheduler().waiting());
      stats_.running = int64_t(batch_.scheduler().running());
      stats_.steps = b.steps;
      stats_.prefill_tokens = b.prefill_tokens, stats_.decode_tokens = b.decode_tokens;
      stats_.prefill_step_s = b.prefill_step_s, stats_.decode_step_s = b.decode_step_s;
      stats_.argmax_rows = b.argmax_rows, stats_.logit_rows = b.logit_rows;
      stats_.generated += std::count_if(tokens.begin(), tokens.end(), [](const SeqToken &t) { return t.token >= 0 && !t.prompt; });  // not embeddings
      stats_.preemptions = batch_.scheduler().preemptions();
      stats_.reused_positions = batch_.scheduler().reused_positions();
      stats_.pool = batch_.pool().stats();
    }
    for (const SeqToken &t : tokens)
      if (auto it = mine.find(t.id); it != mine.end()) it->second->push({false, t.token, "", 0, t.logprobs, t.embedding, t.prompt});
    for (const sched::Finished &f : finished) end(f.id, f.reason, f.cached);
    if (stopping && mine.empty()) return;
  }
}

}  // namespace minfer
