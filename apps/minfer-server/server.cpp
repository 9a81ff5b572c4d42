#include "server.hpp"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <thread>

#include "chat/chat_template.hpp"
#include "chat/reasoning.hpp"
#include "chat/tool_calls.hpp"
#include "common/error.hpp"
#include "common/utf8.hpp"
#include "model_runner.hpp"
#include "anthropic.hpp"
#include "cors.hpp"
#include "responses.hpp"
#include "native.hpp"
#include "openai.hpp"
#include "tool_constraints.hpp"
#include "runtime/engine.hpp"
#include "sampling/end_hold.hpp"
#include "sampling/json_constraint.hpp"

namespace minfer::server {
namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void reply(httplib::Response &res, int status, const json &body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

// The request's body as JSON into `body`; false after a 400 reply that says why it is not.
bool read_body(const httplib::Request &req, httplib::Response &res, json &body) {
  try {
    body = parse_body(req.body);
    return true;
  } catch (const BadRequest &e) {
    reply(res, 400, error_body(400, e.what()));
    return false;
  }
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// How a generation ended, in OpenAI's words.
std::string finish_reason(const std::string &engine_reason) { return engine_reason == "length" ? "length" : "stop"; }

// a == b in time that depends only on the lengths (an API key must not leak by timing).
bool same_secret(const std::string &a, const std::string &b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) diff |= (i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

constexpr size_t kMaxBody = size_t(16) << 20;  // a request body, at most (413 beyond)

}  // namespace

extern const char kChatPage[];  // chat.html, embedded at build time (embed.cmake)

// What exists once the model is loaded.
struct Loaded {
  std::unique_ptr<app::ModelRunner> runner;
  std::unique_ptr<chat::ChatTemplate> tmpl;
  std::string tmpl_error;  // why chat is refused
  chat::ToolFormat tool_format = chat::ToolFormat::none;  // how the template writes tool calls
  ToolSyntax tool_syntax;  // the same, with Mistral's variant, for the call constraints
  bool thinks = false;                                     // its replies may open with <think>
  std::shared_ptr<const sampling::ConstraintVocab> vocab;  // the tokens' texts and ends, for constraints
  std::shared_ptr<const sampling::ConstraintVocab> call_vocab;  // the same with the tool-call markers that are control tokens
  std::unique_ptr<Engine> engine;
  size_t max_prompt_bytes = 0;  // a text longer than this cannot fit the context, whatever it says
};

namespace {

// A token covers at most as many bytes of text as its longest spelling (at least 64 counted,
// for special tokens spelled in the text), so a text of more than n_ctx times that can never
// fit: refused before tokenizing it, which for megabytes costs time and memory.
size_t max_prompt_bytes(const tokenizer::Tokenizer &tok, int64_t n_ctx) {
  size_t longest = 64;
  for (int32_t t = 0; t < tok.n_vocab(); ++t) longest = std::max(longest, tok.token_bytes(t, /*show_special=*/true).size());
  return size_t(n_ctx) * longest;
}

// Tools offered to a template that cannot take them, or whose calls minfer cannot read back.
void refuse_unusable_tools(const Loaded &L) {
  if (L.tool_format == chat::ToolFormat::none)
    throw BadRequest("'tools': this model's chat template (" + L.tmpl->origin() +
                     ") takes no tools; leave them out, or give a template that does ('chat_template:' in the run config)");
  if (L.tool_format == chat::ToolFormat::unsupported)
    throw BadRequest("'tools': this model's chat template (" + L.tmpl->origin() +
                     ") writes tool calls in a syntax minfer does not read yet (it reads <tool_call> as Qwen and Hermes, "
                     "Llama 3's JSON replies, Mistral's [TOOL_CALLS] and Granite's <|tool_call|>)");
}

void refuse_unfittable(const Loaded &L, const std::string &text) {
  if (text.size() > L.max_prompt_bytes)
    throw BadRequest("the prompt has " + std::to_string(text.size()) + " bytes: more than the context of " + std::to_string(L.runner->n_ctx()) +
                     " tokens can hold; shorten it or start the server with a larger -c/--ctx-size");
}

}  // namespace

struct Server::Impl {
  RunConfig cfg;
  ServerOptions opts;
  httplib::Server http;
  std::string model_name;
  std::shared_ptr<Loaded> loaded;  // set once, under m
  std::mutex m;
  std::atomic<bool> stopping{false}, draining{false};
  std::atomic<int64_t> next_id{1}, prompt_tokens{0}, generated{0}, requests{0};
  std::mt19937_64 seeds{std::random_device{}()};
  std::mutex seeds_m;
  ResponseStore kept;  // /v1/responses' stored responses (previous_response_id, GET, DELETE)

  std::shared_ptr<Loaded> ready() {
    std::lock_guard<std::mutex> lock(m);
    return loaded;
  }
  // The engine's counts, or nothing once it is gone: run() drops the engine under m when the
  // server stops, while drain() may still be polling from the signal thread.
  std::optional<Engine::Stats> engine_stats() {
    std::lock_guard<std::mutex> lock(m);
    if (!loaded || !loaded->engine) return std::nullopt;
    return loaded->engine->stats();
  }
  uint64_t fresh_seed() {
    std::lock_guard<std::mutex> lock(seeds_m);
    return seeds();
  }
  void routes();
  // chat: /v1/chat/completions; completions: /v1/completions; native: llama-server's
  // /completion; infill: its /infill (native.hpp); messages: Anthropic's /v1/messages
  // (anthropic.hpp), which goes the chat way; count_tokens: its prompt's size only;
  // responses: OpenAI's /v1/responses (responses.hpp), the chat way too; apply_template:
  // llama-server's /apply-template, a chat request's prompt as the template renders it.
  enum class Route { chat, completions, native, infill, messages, count_tokens, responses, apply_template };
  void completion(const httplib::Request &req, httplib::Response &res, Route route);
  // A finished /v1/responses response, kept unless it says store: false, with the conversation
  // a later response continues (the messages it continued and its own turn).
  void keep_response(const json &response, json conversation, json input_items) {
    if (response.value("store", false) != true) return;
    const std::string id = response["id"].get<std::string>();
    for (size_t i = 0; i < input_items.size(); ++i)  // ids for the items that came without one
      if (input_items[i].is_object() && !input_items[i].contains("id")) input_items[i]["id"] = "in_" + id.substr(5) + "_" + std::to_string(i);
    conversation.push_back(assistant_turn(response["output"]));
    kept.put(id, {response, std::move(conversation), std::move(input_items)});
  }
  void embeddings(const httplib::Request &req, httplib::Response &res);
  void native_reply(httplib::Response &res, const std::shared_ptr<Loaded> &L, const std::shared_ptr<RequestStream> &stream, const GenerationParams &p,
                    int64_t id, bool prompt_only, int64_t n_prompt, std::chrono::steady_clock::time_point start);
};

namespace {

// One request's run: the engine's tokens as text, stop strings applied, deltas handed on
// while they are final. on_delta returns false when the client went away.
struct Outcome {
  std::string text, finish, error;
  std::string stop_word;  // the stop string that ended it, if one did
  std::chrono::steady_clock::time_point first_token{};  // when the first token came (prompt done)
  size_t shown = 0;  // bytes of text handed on as deltas (the rest may hold tool calls)
  int64_t tokens = 0, cached = 0;  // cached: prompt positions reused from shared pages
  std::vector<sampling::TokenLogprobs> logprobs;  // one per token, when asked
  std::vector<sampling::TokenLogprobs> prompt_logprobs;  // each prompt token's after the first (echo with logprobs)
};

// A piece of text to show, the log-probabilities of the tokens it completes (when asked), and
// the byte offset of the piece in the completion. Returns false when the client went away.
using OnDelta = std::function<bool(const std::string &piece, std::span<const sampling::TokenLogprobs> lp, size_t offset)>;
// After each token of a reply that may hold tool calls: the text so far and where what is held
// back begins (calls streamed as they are written). Returns false when the client went away.
using OnHeld = std::function<bool(const std::string &text, size_t held_from)>;

// calls: the format of the tool calls the reply may hold (none: no tools offered); text from
// where a call may begin is held back, and control tokens are shown so its markers are seen.
Outcome drive(Engine &engine, const tokenizer::Tokenizer &tok, int64_t id, const std::shared_ptr<RequestStream> &stream,
              const GenerationParams &p, const std::atomic<bool> &stopping, const OnDelta &on_delta,
              chat::ToolFormat calls = chat::ToolFormat::none, const OnHeld &on_held = {}) {
  Outcome o;
  tokenizer::StreamDecoder dec(tok, /*at_sequence_start=*/false, /*show_special=*/calls != chat::ToolFormat::none);
  const auto plain = [&] { return chat::plain_text_before_calls(calls, o.text); };
  size_t sent = 0, lp_sent = 0;
  size_t stops_from = 0;  // where a stop string may begin: after the first min_tokens tokens' text
  // final: the last delta, which carries the log-probabilities still held even with no text.
  const auto hand_on = [&](size_t upto, bool final = false) {
    if (upto <= sent && !(final && lp_sent < o.logprobs.size())) return true;
    const size_t at = sent;
    const std::string piece = upto > sent ? o.text.substr(sent, upto - sent) : std::string();
    sent = std::max(sent, upto);
    o.shown = sent;
    const std::span<const sampling::TokenLogprobs> lp(o.logprobs.data() + lp_sent, o.logprobs.size() - lp_sent);
    lp_sent = o.logprobs.size();
    return on_delta(piece, lp, at);
  };
  for (;;) {
    const std::optional<EngineEvent> ev = stream->next(200);
    if (!ev) {
      if (stopping || !on_delta("", {}, sent)) {  // the server stops, or the client is gone
        engine.cancel(id);
        o.finish = "cancelled";
        return o;
      }
      continue;
    }
    if (ev->end) {
      o.cached = ev->cached;
      if (ev->reason.rfind("error", 0) == 0) {
        o.error = ev->reason;
        return o;
      }
      o.text += dec.flush();
      const StopCheck sc = check_stops(o.text, p.stop, stops_from);
      o.finish = ev->reason == "cancelled" ? "cancelled" : finish_reason(ev->reason);
      if (sc.stopped) o.finish = "stop", o.stop_word = sc.word;
      hand_on(plain(), true);
      return o;
    }
    if (ev->prompt) {  // a prompt token's log-probability: no text
      if (ev->logprobs) o.prompt_logprobs.push_back(*ev->logprobs);
      continue;
    }
    if (o.tokens++ == 0) o.first_token = std::chrono::steady_clock::now();
    if (ev->logprobs) o.logprobs.push_back(*ev->logprobs);
    // A stop token id (held until min_tokens by the sampling constraint) ends the reply without its text.
    const bool stop_id = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), ev->token) != p.stop_token_ids.end();
    if (!stop_id) o.text += dec.push(ev->token);
    if (o.tokens <= p.min_tokens) stops_from = o.text.size();
    StopCheck sc = check_stops(o.text, p.stop, stops_from);
    if (stop_id && !sc.stopped) {
      o.text += dec.flush();
      sc = {o.text.size(), true, ""};
    }
    if (sc.stopped) {
      engine.cancel(id);
      o.finish = "stop";
      o.stop_word = sc.word;
      hand_on(plain(), true);
      // The end event follows the cancel within a step; it carries the usage's cached count.
      for (int waits = 0; waits < 50; ++waits)
        if (const std::optional<EngineEvent> e = stream->next(100); e && e->end) {
          o.cached = e->cached;
          break;
        }
      return o;
    }
    if (!hand_on(std::min(sc.safe, plain())) || (on_held && !on_held(o.text, o.shown))) {
      engine.cancel(id);
      o.finish = "cancelled";
      return o;
    }
  }
}

// llama-server's answer to /completion and /infill (a stream's last event): the text, why it
// ended, the counts, and the prompt and generation timings.
json native_result(const Outcome &o, bool prompt_only, int64_t n_prompt, const std::string &model, std::chrono::steady_clock::time_point start,
                   bool streamed, const TokenBytes *probs) {
  const auto end = std::chrono::steady_clock::now();
  const auto first = o.tokens > 0 ? o.first_token : end;
  const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  const int64_t predicted = prompt_only ? 0 : o.tokens, evaluated = n_prompt - o.cached;
  const double prompt_ms = ms(first - start), predicted_ms = ms(end - first);
  const auto per = [](double t, int64_t n) { return n > 0 ? json(t / double(n)) : json(nullptr); };
  const auto rate = [](double t, int64_t n) { return t > 0 ? json(1000.0 * double(n) / t) : json(nullptr); };
  const json timings = {{"prompt_n", evaluated}, {"prompt_ms", prompt_ms}, {"prompt_per_token_ms", per(prompt_ms, evaluated)},
                        {"prompt_per_second", rate(prompt_ms, evaluated)}, {"predicted_n", predicted}, {"predicted_ms", predicted_ms},
                        {"predicted_per_token_ms", per(predicted_ms, predicted)}, {"predicted_per_second", rate(predicted_ms, predicted)}};
  const std::string content = prompt_only || streamed ? "" : o.text;
  json r = {{"index", 0}, {"content", content}, {"tokens", json::array()}, {"id_slot", 0}, {"stop", true}, {"model", model},
            {"tokens_predicted", predicted}, {"tokens_evaluated", n_prompt}, {"has_new_line", !prompt_only && o.text.find('\n') != std::string::npos},
            {"truncated", false}, {"stop_type", prompt_only ? "limit" : stop_type(o.finish, !o.stop_word.empty())}, {"stopping_word", o.stop_word},
            {"tokens_cached", o.cached}, {"timings", timings}};
  if (probs && !streamed && !prompt_only) r["completion_probabilities"] = completion_probabilities(o.logprobs, *probs);  // a stream sent them with the pieces
  return r;
}

}  // namespace

void Server::Impl::native_reply(httplib::Response &res, const std::shared_ptr<Loaded> &L, const std::shared_ptr<RequestStream> &stream,
                                const GenerationParams &p, int64_t id, bool prompt_only, int64_t n_prompt, std::chrono::steady_clock::time_point start) {
  // n_probs: each token's log-probabilities (p.logprobs alternatives) as llama-server's completion_probabilities.
  const TokenBytes bytes = [L](int32_t t) { return L->runner->tokenizer().token_bytes(t); };
  const TokenBytes *probs = p.logprobs > 0 ? &bytes : nullptr;
  if (!p.stream) {
    const Outcome o = drive(*L->engine, L->runner->tokenizer(), id, stream, p, stopping, [](const std::string &, auto, size_t) { return true; });
    generated += o.tokens;
    if (!o.error.empty()) return reply(res, 500, error_body(500, o.error));
    return reply(res, 200, native_result(o, prompt_only, n_prompt, model_name, start, false, probs));
  }
  // Server-sent events as llama-server sends them: {content, stop: false} per piece, then the
  // whole result with stop: true (no [DONE]).
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [this, L, stream, p, id, prompt_only, n_prompt, start, bytes](size_t, httplib::DataSink &sink) {
    const auto send = [&](const json &j) {
      const std::string line = "data: " + dump(j) + "\n\n";
      return sink.write(line.data(), line.size());
    };
    bool alive = true;
    const Outcome o = drive(*L->engine, L->runner->tokenizer(), id, stream, p, stopping,
                            [&](const std::string &piece, std::span<const sampling::TokenLogprobs> lp, size_t) {
                              if (!alive || !sink.is_writable()) return alive = false;
                              if (piece.empty() || prompt_only) return true;
                              json chunk = {{"index", 0}, {"content", piece}, {"tokens", json::array()}, {"stop", false}, {"id_slot", 0}};
                              if (p.logprobs > 0) chunk["completion_probabilities"] = completion_probabilities(lp, bytes);
                              return alive = send(chunk);
                            });
    generated += o.tokens;
    if (!alive || o.finish == "cancelled") return false;
    send(o.error.empty() ? native_result(o, prompt_only, n_prompt, model_name, start, true, nullptr) : error_body(500, o.error));
    sink.done();
    return true;
  });
}

// /v1/embeddings: every input runs as an embed request of the engine (batched with whatever
// else runs), its last token's hidden state after the final norm, to unit length.
void Server::Impl::embeddings(const httplib::Request &req, httplib::Response &res) {
  const std::shared_ptr<Loaded> L = ready();
  if (!L) return reply(res, 503, error_body(503, "the model is loading; retry when GET /health answers 200"));
  if (draining) return reply(res, 503, error_body(503, "the server is shutting down"));
  if (!L->runner->model().opts.embeddings)
    return reply(res, 400, error_body(400, "this server computes no embeddings: start it with --embeddings (or 'server: {embeddings: true}' in the run config)"));
  // The file's pooling (llama.cpp's <arch>.pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank):
  // only the last token's state is given here; a model trained for another is refused.
  const models::Model &m = L->runner->model();
  if (const std::string key = m.hp.arch + ".pooling_type"; m.file->find(key)) {
    const int64_t pooling = m.file->get_int(key);
    if (pooling != 0 && pooling != 3)
      return reply(res, 400, error_body(400, cfg.model + ": " + key + " is " + std::to_string(pooling) + " (" +
                                                 (pooling == 1 ? "mean" : pooling == 2 ? "cls" : pooling == 4 ? "rank" : "unknown") +
                                                 " pooling); minfer gives last-token embeddings only"));
  }
  const tokenizer::Tokenizer &tok = L->runner->tokenizer();
  EmbeddingRequest er;
  std::vector<std::vector<int32_t>> prompts;
  try {
    er = parse_embeddings(parse_body(req.body));
    for (size_t i = 0; i < er.inputs.size(); ++i) {
      const PromptField &f = er.inputs[i];
      if (!f.is_ids) refuse_unfittable(*L, f.text);
      // The vocabulary's BOS and EOS as it asks (Qwen3-Embedding's ends with <|endoftext|>).
      prompts.push_back(f.is_ids ? f.ids : tok.encode(f.text, /*add_special=*/true, /*parse_special=*/false));
      for (const int32_t t : prompts.back())
        if (t >= tok.n_vocab()) throw BadRequest("'input' token id " + std::to_string(t) + " is past the vocabulary");
      if (int64_t(prompts.back().size()) >= L->runner->n_ctx())
        throw BadRequest("'input' item " + std::to_string(i) + " has " + std::to_string(prompts.back().size()) + " tokens; the context holds " +
                         std::to_string(L->runner->n_ctx()) + ": shorten it or start the server with a larger -c/--ctx-size");
    }
  } catch (const BadRequest &e) {
    return reply(res, 400, error_body(400, e.what()));
  } catch (const std::exception &e) {
    return reply(res, 400, error_body(400, std::string("the body is not JSON: ") + e.what()));
  }
  if (er.dimensions > L->runner->model().hp.n_embd)
    return reply(res, 400, error_body(400, "'dimensions' is " + std::to_string(er.dimensions) + "; this model's embeddings have " +
                                               std::to_string(L->runner->model().hp.n_embd)));
  std::vector<std::pair<int64_t, std::shared_ptr<RequestStream>>> running;
  const auto cancel_all = [&] {
    for (const auto &[rid, s] : running) L->engine->cancel(rid);
  };
  int64_t n_tokens = 0;
  for (const std::vector<int32_t> &p : prompts) {
    SeqRequest r{next_id++, p, 1, sampling::Config{}, -1};
    r.embed = true;
    if (const std::string why = L->engine->check(r); !why.empty()) {
      cancel_all();
      return reply(res, 400, error_body(400, why));
    }
    std::shared_ptr<RequestStream> s = L->engine->submit(r);
    if (!s) {
      cancel_all();
      res.set_header("Retry-After", "1");
      return reply(res, 503, error_body(503, "the server is busy (its queue is full); retry later"));
    }
    running.emplace_back(r.id, std::move(s));
    n_tokens += int64_t(p.size());
  }
  ++requests;
  prompt_tokens += n_tokens;
  json data = json::array();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.timeout_s);
  for (size_t i = 0; i < running.size(); ++i) {
    std::vector<float> vec;
    for (;;) {
      if (stopping || std::chrono::steady_clock::now() > deadline) {
        cancel_all();
        return reply(res, 503, error_body(503, stopping ? "the server is stopping" : "the embeddings took longer than the timeout"));
      }
      const std::optional<EngineEvent> ev = running[i].second->next(200);
      if (!ev) continue;
      if (!ev->end) {
        if (!ev->embedding.empty()) vec = ev->embedding;
        continue;
      }
      if (ev->reason.rfind("error", 0) == 0 || vec.empty()) {
        cancel_all();
        return reply(res, 500, error_body(500, ev->reason.empty() || vec.empty() ? "no embedding came back (" + ev->reason + ")" : ev->reason));
      }
      break;
    }
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", embedding_json(unit_embedding(vec, er.dimensions), er.base64)}});
  }
  reply(res, 200, {{"object", "list"}, {"data", std::move(data)}, {"model", model_name}, {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
}

Server::Server(RunConfig cfg, ServerOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(cfg);
  impl_->opts = std::move(opts);
  impl_->model_name = impl_->opts.alias.empty() ? std::filesystem::path(impl_->cfg.model).filename().string() : impl_->opts.alias;
}

Server::~Server() { stop(); }

void Server::stop() {
  impl_->stopping = true;
  impl_->http.stop();
}

void Server::drain() {
  Impl &I = *impl_;
  I.draining = true;  // new generations get 503 from here on
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(I.opts.timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::optional<Engine::Stats> st = I.engine_stats();
    if (!st || (st->running == 0 && st->waiting == 0)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the last responses leave their threads
  stop();  // what is still running past the timeout ends "cancelled"
}

void Server::Impl::completion(const httplib::Request &req, httplib::Response &res, Route route) {
  const bool anthropic = route == Route::messages || route == Route::count_tokens;
  const bool chat = route == Route::chat || anthropic || route == Route::responses || route == Route::apply_template, native = route == Route::native || route == Route::infill;
  const std::shared_ptr<Loaded> L = ready();
  if (!L) return reply(res, 503, error_body(503, "the model is loading; retry when GET /health answers 200"));
  if (draining) return reply(res, 503, error_body(503, "the server is shutting down"));
  json body;
  if (!read_body(req, res, body)) return;
  app::ModelRunner &runner = *L->runner;
  const tokenizer::Tokenizer &tok = runner.tokenizer();
  GenerationParams p;
  ToolsRequest tools;
  bool thinks = false, opened = false;  // the reply's think block goes to reasoning_content; the prompt opened it
  bool prompt_only = false;             // native n_predict 0: the prompt is evaluated, nothing generated
  std::vector<int32_t> prompt;
  json conversation;                    // responses: the messages a later response would continue
  json input_items;                     // responses: the request's input as items
  std::string echoed;                   // completions with echo: the prompt's text
  // /v1/completions with a batch of prompts: each one's tokens and echo (prompt and echoed are
  // the first's); one prompt otherwise.
  std::vector<std::vector<int32_t>> batch;
  std::vector<std::string> batch_echo;
  try {
    NativeRequest nr;
    if (native) nr = native_to_openai(body), prompt_only = nr.prompt_only;
    if (anthropic) nr.openai = anthropic_to_openai(body);
    if (route == Route::responses) {
      json previous = json::array();
      if (const auto it = body.is_object() ? body.find("previous_response_id") : body.end(); body.is_object() && it != body.end() && !it->is_null()) {
        if (!it->is_string()) throw BadRequest("'previous_response_id' must be a string, a response's id");
        const std::optional<ResponseStore::Entry> e = kept.get(it->get<std::string>());
        if (!e)
          throw BadRequest("'previous_response_id': no response '" + it->get<std::string>() + "' is kept here (the server keeps the latest " +
                           std::to_string(kept.max_entries()) + " stored ones in memory, none from before it started; 'store': false keeps none)");
        previous = e->conversation;
      }
      ResponsesRequest rq = responses_request(body, previous);
      nr.openai = std::move(rq.openai);
      conversation = std::move(rq.conversation);
      input_items = std::move(rq.input_items);
    }
    const json &fields = native || anthropic || route == Route::responses ? nr.openai : body;
    p = parse_generation(fields, app::sampling_config(cfg.generation), fresh_seed(), chat ? Api::chat : Api::completions);
    // Fill-in-the-middle leaves the reply a quarter of the context unless max_tokens says.
    const int64_t reserve = p.max_tokens > 0 ? p.max_tokens : runner.n_ctx() / 4;
    if (p.response_schema) p.sampling.constraint = sampling::json_constraint(L->vocab, p.response_schema);
    if (p.grammar) p.sampling.constraint = sampling::gbnf_constraint(L->vocab, p.grammar);
    for (const auto &[t, b] : p.sampling.logit_bias)
      if (t >= tok.n_vocab())
        throw BadRequest("'logit_bias' token " + std::to_string(t) + " is past the vocabulary (" + std::to_string(tok.n_vocab()) + " tokens)");
    if (chat) {
      if (!L->tmpl) return reply(res, 400, error_body(400, "chat completions need a chat template: " + L->tmpl_error));
      tools = parse_tools(fields);
      jinja::Dict extra;
      const json kwargs = template_kwargs(fields);  // named: items() of a temporary would dangle
      for (const auto &[k, v] : kwargs.items()) extra.emplace_back(k, chat::from_json(v));
      if (tools.offered) {
        refuse_unusable_tools(*L);
        extra.emplace_back("tools", chat::from_json(tools.tools));
      }
      if (p.grammar && tools.offered) throw BadRequest("'grammar' and 'tools' both constrain the reply; give one (or 'tool_choice': \"none\")");
      if (!tools.forced.empty()) {
        if (p.response_schema) throw BadRequest("'tool_choice' forces a tool call, which 'response_format' contradicts; give one of them");
        p.sampling.constraint = forced_call(L->tool_syntax, L->call_vocab, tools);
      } else if (tools.offered && !p.response_schema && !p.grammar) {
        p.sampling.constraint = opened_calls(L->tool_syntax, L->call_vocab, tools);
      }
      const std::string text = L->tmpl->render(chat::from_json(chat_messages(fields)), /*add_generation_prompt=*/true, extra);
      if (route == Route::apply_template) return reply(res, 200, {{"prompt", text}});
      refuse_unfittable(*L, text);
      prompt = chat::tokenize_prompt(tok, text);
      thinks = L->thinks && reasoning_split(fields);
      opened = thinks && chat::prompt_opens_thinking(text);
    } else if (route == Route::infill) {
      const InfillInput in = parse_infill(body);
      refuse_unfittable(*L, in.prefix + in.suffix + in.prompt);
      prompt = infill_prompt(tok, in, runner.n_ctx(), reserve);
    } else if (const auto sx = body.find("suffix"); route == Route::completions && sx != body.end() && !sx->is_null()) {
      // OpenAI's completions with a suffix: the prompt is the text before the cursor.
      const PromptField f = completion_prompt(body);
      if (!sx->is_string() || f.is_ids) throw BadRequest("'suffix' must be a string, with a text 'prompt' before it");
      refuse_unfittable(*L, f.text + sx->get<std::string>());
      prompt = infill_prompt(tok, InfillInput{f.text, sx->get<std::string>(), "", {}}, runner.n_ctx(), reserve);
      echoed = f.text;
    } else {
      const std::vector<PromptField> fs = route == Route::completions ? completion_prompts(fields) : std::vector<PromptField>{completion_prompt(fields)};
      if (fs.size() * size_t(p.n) > 128) throw BadRequest("'prompt' holds " + std::to_string(fs.size()) + " prompts of " + std::to_string(p.n) + " choices each; at most 128 in all");
      for (const PromptField &f : fs) {
        std::string echo;
        if (f.is_ids) {
          for (const int32_t t : f.ids)
            if (t >= tok.n_vocab()) throw BadRequest("'prompt' token id " + std::to_string(t) + " is past the vocabulary (" + std::to_string(tok.n_vocab()) + " tokens)");
          batch.push_back(f.ids);
          if (p.echo) {  // the ids' text, as a sequence's start reads
            tokenizer::StreamDecoder dec(tok, /*at_sequence_start=*/true);
            for (const int32_t t : f.ids) echo += dec.push(t);
            echo += dec.flush();
          }
        } else {
          refuse_unfittable(*L, f.text);
          batch.push_back(chat::tokenize_prompt(tok, f.text));
          echo = f.text;
        }
        batch_echo.push_back(p.echo ? std::move(echo) : std::string());
      }
      prompt = batch[0], echoed = batch_echo[0];
    }
    if (p.sampling.dry_multiplier > 0.0f)  // DRY's breakers: the request's, else the run config's
      p.sampling.dry_breakers = sampling::tokens_holding(L->vocab->texts, fields.contains("dry_sequence_breakers") ? p.dry_breakers
                                                                                                                : cfg.generation.dry_sequence_breakers);
    for (const int32_t t : p.stop_token_ids)
      if (t >= tok.n_vocab())
        throw BadRequest("'stop_token_ids' token " + std::to_string(t) + " is past the vocabulary (" + std::to_string(tok.n_vocab()) + " tokens)");
    // Ends held back: the end of generation throughout with ignore_eos, it and the stop token ids until min_tokens.
    if (p.ignore_eos) p.sampling.constraint = sampling::hold_end(p.sampling.constraint, L->vocab->eog, sampling::kNeverEnd);
    if (p.min_tokens > 0) {
      std::vector<int32_t> ends = p.stop_token_ids;
      if (!p.ignore_eos) ends.insert(ends.end(), L->vocab->eog.begin(), L->vocab->eog.end());
      p.sampling.constraint = sampling::hold_end(p.sampling.constraint, std::move(ends), p.min_tokens);
    }
    if (!p.echo) echoed.clear();
  } catch (const BadRequest &e) {
    return reply(res, 400, error_body(400, e.what()));
  } catch (const Error &e) {  // a template that raised, a tokenizer error
    return reply(res, 400, error_body(400, e.what()));
  }
  if (batch.empty()) batch = {prompt}, batch_echo = {echoed};
  const int64_t n_ctx = runner.n_ctx();
  for (size_t b = 0; b < batch.size(); ++b) {
    const std::string which = batch.size() > 1 ? "prompt " + std::to_string(b) : "the prompt";
    if (batch[b].empty()) return reply(res, 400, error_body(400, which + " is empty"));
    if (n_ctx - int64_t(batch[b].size()) < 1)
      return reply(res, 400, error_body(400, which + " has " + std::to_string(batch[b].size()) + " tokens but the context holds " + std::to_string(n_ctx) +
                                                 "; shorten it or start the server with a larger -c/--ctx-size"));
  }
  const int64_t room = n_ctx - int64_t(prompt.size());
  if (route == Route::count_tokens) return reply(res, 200, {{"input_tokens", prompt.size()}});
  const int64_t id = next_id++;
  const auto start = std::chrono::steady_clock::now();
  // max_tokens 0 (echo: the prompt scored): one token runs and is not shown.
  SeqRequest r{id, prompt, p.max_tokens > 0 ? std::min(p.max_tokens, room) : p.max_tokens == 0 ? 1 : room, p.sampling, p.logprobs};
  if (p.echo && p.logprobs >= 0) r.prompt_logprobs = p.logprobs;
  if (const std::string why = L->engine->check(r); !why.empty()) return reply(res, 400, error_body(400, why));
  std::shared_ptr<RequestStream> stream = L->engine->submit(r);
  if (!stream) {
    res.set_header("Retry-After", "1");
    return reply(res, 503, error_body(503, "the server is busy (its queue is full); retry later"));
  }
  // n > 1: the other choices run beside the first, each its own sequence and seed; a batch's
  // later prompts too, choice index = prompt * n + choice (of_prompt: each choice's prompt).
  std::vector<std::pair<int64_t, std::shared_ptr<RequestStream>>> more;
  std::vector<size_t> of_prompt(size_t(p.n), 0);
  for (size_t b = 0; b < batch.size(); ++b)
    for (int64_t i = b == 0 ? 1 : 0; i < p.n; ++i) {
      SeqRequest ri = r;
      ri.id = next_id++;
      ri.prompt = batch[b];
      const int64_t room_b = n_ctx - int64_t(batch[b].size());
      ri.max_tokens = p.max_tokens > 0 ? std::min(p.max_tokens, room_b) : p.max_tokens == 0 ? 1 : room_b;
      ri.sampling.seed = p.sampling.seed + uint64_t(i);
      if (const std::string why = L->engine->check(ri); !why.empty()) {
        L->engine->cancel(id);
        for (const auto &[rid, _] : more) L->engine->cancel(rid);
        return reply(res, 400, error_body(400, why));
      }
      std::shared_ptr<RequestStream> s = L->engine->submit(ri);
      if (!s) {
        L->engine->cancel(id);
        for (const auto &[rid, _] : more) L->engine->cancel(rid);
        res.set_header("Retry-After", "1");
        return reply(res, 503, error_body(503, "the server is busy (its queue is full); retry later"));
      }
      more.emplace_back(ri.id, std::move(s));
      if (b > 0) of_prompt.push_back(b);
    }
  ++requests;
  int64_t all_prompt_tokens = 0;
  for (const auto &b : batch) all_prompt_tokens += int64_t(b.size());
  prompt_tokens += all_prompt_tokens;
  if (native) return native_reply(res, L, stream, p, id, prompt_only, int64_t(prompt.size()), start);
  const std::string cid = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(id);
  const int64_t created = unix_now();
  const int64_t n_prompt = all_prompt_tokens;  // every prompt of a batch
  const auto usage = [n_prompt](const Outcome &o) {
    return json{{"prompt_tokens", n_prompt}, {"completion_tokens", o.tokens}, {"total_tokens", n_prompt + o.tokens},
                {"prompt_tokens_details", {{"cached_tokens", o.cached}}}};
  };
  const std::string object = chat ? "chat.completion" : "text_completion";
  const json shell = route == Route::responses ? response_shell(body, "resp_" + std::to_string(id), model_name, created) : json();
  const auto tokens_in = [L](const std::string &text) { return int64_t(L->runner->tokenizer().encode(text, false, false).size()); };
  const chat::ToolFormat calls = tools.offered ? L->tool_format : chat::ToolFormat::none;
  const TokenBytes bytes = [L](int32_t t) { return L->runner->tokenizer().token_bytes(t); };
  const bool want_lp = p.logprobs >= 0;
  const auto logprobs = [chat, want_lp, bytes](std::span<const sampling::TokenLogprobs> lp, size_t offset) -> json {
    if (!want_lp) return nullptr;
    const std::vector<sampling::TokenLogprobs> v(lp.begin(), lp.end());
    return chat ? chat_logprobs(v, bytes) : completion_logprobs(v, bytes, offset);
  };

  if (!p.stream) {
    // Each choice: its sequence's text, as completions text or a chat message (reasoning and
    // tool calls split off); the usage counts the prompt once and every choice's tokens.
    std::vector<std::pair<int64_t, std::shared_ptr<RequestStream>>> all = {{id, stream}};
    all.insert(all.end(), more.begin(), more.end());
    json choices = json::array();
    Outcome total;
    for (size_t i = 0; i < all.size(); ++i) {
      const auto [rid, s] = all[i];
      const Outcome o = drive(*L->engine, tok, rid, s, p, stopping, [](const std::string &, auto, size_t) { return true; }, calls);
      generated += o.tokens;
      if (!o.error.empty()) {
        for (size_t j = i + 1; j < all.size(); ++j) L->engine->cancel(all[j].first);
        return reply(res, 500, error_body(500, o.error));
      }
      total.tokens += o.tokens;
      if (i == 0) total.cached = o.cached;
      if (!chat) {
        const bool scored = p.max_tokens == 0;  // the prompt only: the one token run is not shown
        json lp = logprobs(o.logprobs, 0);
        const std::string &echo = batch_echo[of_prompt[i]];
        if (p.echo && want_lp)
          lp = echo_logprobs(batch[of_prompt[i]], o.prompt_logprobs, scored ? std::vector<sampling::TokenLogprobs>{} : o.logprobs, bytes, echo.size());
        if (scored) total.tokens -= o.tokens;
        choices.push_back({{"index", i}, {"finish_reason", scored ? std::string("length") : o.finish}, {"logprobs", lp},
                           {"text", echo + (scored ? std::string() : o.text)}});
        continue;
      }
      const chat::ReasoningSplitter::Pieces parts = thinks ? chat::split_reasoning(o.text, opened) : chat::ReasoningSplitter::Pieces{"", o.text};
      chat::ParsedReply r = chat::parse_tool_calls(calls, parts.content);
      if (r.calls.empty()) r.content = parts.content;  // no calls: the text as it came
      if (!tools.parallel && r.calls.size() > 1) r.calls.resize(1);  // parallel_tool_calls false: the first
      if (route == Route::messages) {
        const AnthropicReply ar{"msg_" + std::to_string(id), model_name, parts.reasoning, r.content, anthropic_stop_reason(o.finish, o.stop_word, !r.calls.empty()),
                                o.stop_word, r.calls, id, n_prompt, o.tokens, o.cached};
        return reply(res, 200, anthropic_message(ar));
      }
      if (route == Route::responses) {
        const ResponsesReply rr{parts.reasoning, r.content, o.finish, r.calls, id, n_prompt, o.tokens, o.cached, tokens_in(parts.reasoning)};
        json done = response_object(shell, rr);
        keep_response(done, conversation, input_items);
        return reply(res, 200, done);
      }
      json message = {{"role", "assistant"}, {"content", r.content}};
      if (!parts.reasoning.empty()) message["reasoning_content"] = parts.reasoning;
      json choice = {{"index", i}, {"finish_reason", o.finish}, {"logprobs", logprobs(o.logprobs, 0)}};
      if (!r.calls.empty()) {
        message["content"] = r.content.empty() ? json(nullptr) : json(r.content);
        message["tool_calls"] = tool_calls_json(r.calls, rid, /*streaming=*/false);
        choice["finish_reason"] = "tool_calls";
      }
      choice["message"] = std::move(message);
      choices.push_back(std::move(choice));
    }
    return reply(res, 200, {{"id", cid}, {"object", object}, {"created", created}, {"model", model_name}, {"choices", std::move(choices)}, {"usage", usage(total)}});
  }

  // Server-sent events. OpenAI: one chunk per piece of text, the last with the finish reason,
  // the usage when asked, then [DONE]. Anthropic: its named events (anthropic.hpp).
  res.set_header("Cache-Control", "no-cache");
  const bool parallel = tools.parallel;
  // n > 1 (chat and completions): the choices one after another, each chunk naming its index
  // (they run side by side in the engine meanwhile); the usage, when asked, and [DONE] after the last.
  std::vector<std::pair<int64_t, std::shared_ptr<RequestStream>>> all = {{id, stream}};
  all.insert(all.end(), more.begin(), more.end());
  res.set_chunked_content_provider("text/event-stream", [this, L, all, p, id, cid, created, chat, route, usage, logprobs, calls, thinks, opened,
                                                         n_prompt, parallel, shell, tokens_in, conversation, batch_echo, of_prompt,
                                                         input_items](size_t, httplib::DataSink &sink) {
    size_t index = 0;  // the choice being streamed
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    const auto write = [&](const std::string &text) { return text.empty() || sink.write(text.data(), text.size()); };
    const auto send = [&](const json &j) { return write("data: " + dump(j) + "\n\n"); };
    const auto chunk = [&](const json &delta_or_text, const json &finish, const json &lp = nullptr) {
      json choice = {{"index", index}, {"finish_reason", finish}, {"logprobs", lp}};
      if (chat) choice["delta"] = delta_or_text;
      else choice["text"] = delta_or_text;
      return json{{"id", cid}, {"object", chunk_object}, {"created", created}, {"model", model_name}, {"choices", json::array({choice})}};
    };
    // What a chat stream says, in the words of the API asked (content also carries a
    // completions piece; calls: the reply's tool calls, at the end; called: it made some).
    struct Emit {
      std::function<bool(const std::string &, const json &)> reasoning, content;
      std::function<bool(const std::vector<chat::ToolCall> &, size_t first)> calls;   // whole, numbered from first
      std::function<bool(size_t n, const std::string &name)> call_begin;            // streamed: a call's name,
      std::function<bool(size_t n, const std::string &piece)> call_arguments;       // then its arguments' text
      std::function<void(const Outcome &, bool called)> end;  // a choice's
      std::function<void(const Outcome &total)> close;           // the stream's, after the last choice
      std::function<void(const std::string &)> error;
      std::function<bool()> open;                                // a choice's first words
    } em;
    AnthropicStream as("msg_" + std::to_string(id), model_name, n_prompt, 0);
    ResponsesStream rs(shell, id);
    bool alive = true;
    if (route == Route::responses) {
      alive = write(rs.start());
      em.reasoning = [&](const std::string &x, const json &) { return write(rs.reasoning(x)); };
      em.content = [&](const std::string &x, const json &) { return write(rs.text(x)); };
      em.calls = [&](const std::vector<chat::ToolCall> &c, size_t first) { return write(rs.calls(c, first)); };
      em.call_begin = [&](size_t n, const std::string &name) { return write(rs.call_begin(n, name)); };
      em.call_arguments = [&](size_t, const std::string &piece) { return write(rs.call_arguments(piece)); };
      em.end = [&](const Outcome &o, bool called) {
        write(rs.finish(called ? "tool_calls" : o.finish, n_prompt, o.tokens, o.cached, tokens_in(rs.reasoning_text())));
        keep_response(rs.final_response(), conversation, input_items);
      };
      em.close = [](const Outcome &) {};
      em.open = [] { return true; };
      em.error = [&](const std::string &m) { write(rs.error(m)); };
    } else if (route == Route::messages) {
      alive = write(as.start());
      em.reasoning = [&](const std::string &x, const json &) { return write(as.thinking(x)); };
      em.content = [&](const std::string &x, const json &) { return write(as.text(x)); };
      em.calls = [&](const std::vector<chat::ToolCall> &c, size_t first) { return write(as.tool_uses(c, id, first)); };
      em.call_begin = [&](size_t n, const std::string &name) { return write(as.tool_use_begin(id, n, name)); };
      em.call_arguments = [&](size_t, const std::string &piece) { return write(as.tool_input(piece)); };
      em.end = [&](const Outcome &o, bool called) { write(as.finish(anthropic_stop_reason(o.finish, o.stop_word, called), o.stop_word, o.tokens)); };
      em.close = [](const Outcome &) {};
      em.open = [] { return true; };
      em.error = [&](const std::string &m) { write(as.error(m)); };
    } else {
      em.open = [&] {
        if (chat && !send(chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr))) return false;
        const std::string &echoed = batch_echo[of_prompt[index]];
        return echoed.empty() || send(chunk(json(echoed), nullptr));  // completions with echo: the prompt first
      };
      em.reasoning = [&](const std::string &x, const json &lp) { return send(chunk(json{{"reasoning_content", x}}, nullptr, lp)); };
      em.content = [&](const std::string &x, const json &lp) { return send(chat ? chunk(json{{"content", x}}, nullptr, lp) : chunk(json(x), nullptr, lp)); };
      em.calls = [&](const std::vector<chat::ToolCall> &c, size_t first) {
        return send(chunk(json{{"tool_calls", tool_calls_json(c, all[index].first, /*streaming=*/true, first)}}, nullptr));
      };
      em.call_begin = [&](size_t n, const std::string &name) {
        return send(chunk(json{{"tool_calls", json::array({{{"index", n}, {"id", tool_call_id(all[index].first, n)}, {"type", "function"},
                                                             {"function", {{"name", name}, {"arguments", ""}}}}})}}, nullptr));
      };
      em.call_arguments = [&](size_t n, const std::string &piece) {
        return send(chunk(json{{"tool_calls", json::array({{{"index", n}, {"function", {{"arguments", piece}}}}})}}, nullptr));
      };
      em.end = [&](const Outcome &o, bool called) { send(chunk(chat ? json::object() : json(""), called ? "tool_calls" : o.finish)); };
      em.close = [&](const Outcome &total) {
        if (p.include_usage) send({{"id", cid}, {"object", chunk_object}, {"created", created}, {"model", model_name}, {"choices", json::array()}, {"usage", usage(total)}});
        write("data: [DONE]\n\n");
      };
      em.error = [&](const std::string &m) {
        send(error_body(500, m));
        write("data: [DONE]\n\n");
      };
    }
    Outcome total;
    for (; index < all.size(); ++index) {
      const auto [rid, stream] = all[index];
      if (alive) alive = em.open();
      // A thinking reply's text goes out as reasoning, then content; content_sent is what went
      // out as content (where the calls are looked for at the end).
      chat::ReasoningSplitter splitter(opened);
      std::string visible, content_sent;
      chat::ToolCallStream call_stream(calls);  // calls streamed as they are written
      const auto send_parts = [&](const chat::ReasoningSplitter::Pieces &parts, const json &lp) {
        if (!parts.reasoning.empty() && !em.reasoning(parts.reasoning, parts.content.empty() ? lp : json(nullptr))) return false;
        content_sent += parts.content;
        if (parts.content.empty() && (!parts.reasoning.empty() || lp.is_null())) return true;
        return em.content(parts.content, lp);
      };
      const Outcome o = drive(*L->engine, L->runner->tokenizer(), rid, stream, p, stopping,
                              [&](const std::string &piece, std::span<const sampling::TokenLogprobs> lp, size_t offset) {
                                if (!alive || !sink.is_writable()) return alive = false;
                                if (piece.empty() && lp.empty()) return true;
                                if (!chat) return alive = em.content(piece, logprobs(lp, offset));
                                visible += piece;
                                return alive = send_parts(thinks ? splitter.advance(visible, false) : chat::ReasoningSplitter::Pieces{"", piece},
                                                          logprobs(lp, offset));
                              },
                              calls, [&](const std::string &text, size_t held_from) {
                                // Calls stream from the answer only (one written while thinking is no call).
                                if (calls == chat::ToolFormat::none || calls == chat::ToolFormat::unsupported || !alive || (thinks && !chat::in_answer(text, held_from, opened))) return alive;
                                for (const chat::ToolCallStream::Event &e : call_stream.advance(text, held_from))
                                  if (!(alive = e.start ? em.call_begin(e.index, e.text) : em.call_arguments(e.index, e.text))) break;
                                return alive;
                              });
      generated += o.tokens;
      total.tokens += o.tokens;
      if (index == 0) total.cached = o.cached;
      const auto cancel_rest = [&] {
        for (size_t j = index + 1; j < all.size(); ++j) L->engine->cancel(all[j].first);
      };
      if (!alive || o.finish == "cancelled") return cancel_rest(), false;  // the connection is gone: nothing more to say
      if (!o.error.empty()) {
        em.error(o.error);
        cancel_rest();
        sink.done();
        return true;
      } else {
        // What was held back (a tail that could still close the think block, text from where a
        // tool call may begin): the calls, or the rest of the text.
        // Calls streamed while they were written are not sent again: the rest follow whole.
        std::vector<chat::ToolCall> made;
        const size_t streamed = call_stream.streamed();
        if (chat) {
          visible += o.text.substr(o.shown);
          chat::ReasoningSplitter::Pieces rest = thinks ? splitter.advance(visible, true) : chat::ReasoningSplitter::Pieces{"", o.text.substr(o.shown)};
          if (!rest.content.empty())
            if (chat::ParsedReply r = chat::parse_tool_calls(calls, content_sent + rest.content); !r.calls.empty()) {
              made = std::move(r.calls);
              if (!parallel && made.size() > 1) made.resize(1);
              rest.content.clear();
            }
          if (streamed > 0) rest.content.clear();  // the held text went out as calls (a call cut off ends "length")
          send_parts(rest, nullptr);
          if (made.size() > streamed) em.calls(std::vector<chat::ToolCall>(made.begin() + std::ptrdiff_t(streamed), made.end()), streamed);
        }
        em.end(o, !made.empty());
      }
    }
    em.close(total);
    sink.done();
    return true;
  });
}

void Server::Impl::routes() {
  // CORS first (a browser's preflight carries no key, and a page must be able to read a 401),
  // then the key, when one is set, on everything but /health (probes carry no key).
  http.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
    const std::string origin = req.get_header_value("Origin");
    const bool allowed = origin_allowed(origin, opts.cors_origins);
    if (allowed) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
    if (req.method == "OPTIONS" && req.has_header("Access-Control-Request-Method")) {  // a preflight
      if (!allowed) {
        reply(res, 403, error_body(403, "origin '" + origin + "' may not call this server from a browser: start it with --cors-origins " +
                                            (origin.empty() ? std::string("ORIGIN") : origin) + " (or cors_origins in the run config's server section)"));
        return httplib::Server::HandlerResponse::Handled;
      }
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, X-Api-Key" : asked);
      res.set_header("Access-Control-Max-Age", "600");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (opts.api_key.empty() || req.path == "/health" || req.path == "/v1/models" || req.path.starts_with("/v1/models/") || req.path == "/")
      return httplib::Server::HandlerResponse::Unhandled;
    if (same_secret(req.get_header_value("Authorization"), "Bearer " + opts.api_key) || same_secret(req.get_header_value("x-api-key"), opts.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string why = "a valid API key is needed: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY')";
    reply(res, 401, req.path.starts_with("/v1/messages") ? anthropic_error(401, why) : error_body(401, why));
    return httplib::Server::HandlerResponse::Handled;
  });
  http.Get("/", [](const httplib::Request &, httplib::Response &res) { res.set_content(kChatPage, "text/html; charset=utf-8"); });
  http.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
    if (!ready()) return reply(res, 503, error_body(503, "loading the model"));
    reply(res, 200, {{"status", "ok"}});
  });
  const auto model_object = [this] { return json{{"id", model_name}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "minfer"}}; };
  http.Get("/v1/models", [model_object](const httplib::Request &, httplib::Response &res) {
    reply(res, 200, {{"object", "list"}, {"data", json::array({model_object()})}});
  });
  http.Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request &req, httplib::Response &res) {
    if (req.matches[1] != model_name) return reply(res, 404, error_body(404, "no model '" + std::string(req.matches[1]) + "' here: this server serves '" + model_name + "'"));
    reply(res, 200, model_object());
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request &req, httplib::Response &res) { completion(req, res, Route::chat); });
  http.Post("/v1/completions", [this](const httplib::Request &req, httplib::Response &res) { completion(req, res, Route::completions); });
  http.Post("/v1/responses", [this](const httplib::Request &req, httplib::Response &res) { completion(req, res, Route::responses); });
  http.Post("/apply-template", [this](const httplib::Request &req, httplib::Response &res) { completion(req, res, Route::apply_template); });
  http.Get(R"(/v1/responses/([A-Za-z0-9_-]+))", [this](const httplib::Request &req, httplib::Response &res) {
    const std::optional<ResponseStore::Entry> e = kept.get(req.matches[1]);
    if (!e) return reply(res, 404, error_body(404, "no response '" + std::string(req.matches[1]) + "' is kept here"));
    reply(res, 200, e->response);
  });
  http.Get(R"(/v1/responses/([A-Za-z0-9_-]+)/input_items)", [this](const httplib::Request &req, httplib::Response &res) {
    const std::optional<ResponseStore::Entry> e = kept.get(req.matches[1]);
    if (!e) return reply(res, 404, error_body(404, "no response '" + std::string(req.matches[1]) + "' is kept here"));
    try {
      const std::string limit = req.has_param("limit") ? req.get_param_value("limit") : "20";
      if (limit.empty() || limit.size() > 4 || limit.find_first_not_of("0123456789") != std::string::npos) throw BadRequest("'limit' must be from 1 to 100");
      reply(res, 200, input_items_page(e->input_items, req.has_param("order") ? req.get_param_value("order") : "desc", std::stoll(limit),
                                       req.has_param("after") ? req.get_param_value("after") : ""));
    } catch (const BadRequest &b) {
      reply(res, 400, error_body(400, b.what()));
    }
  });
  http.Delete(R"(/v1/responses/([A-Za-z0-9_-]+))", [this](const httplib::Request &req, httplib::Response &res) {
    const std::string id = req.matches[1];
    if (!kept.erase(id)) return reply(res, 404, error_body(404, "no response '" + id + "' is kept here"));
    reply(res, 200, {{"id", id}, {"object", "response"}, {"deleted", true}});
  });
  http.Post("/completion", [this](const httplib::Request &req, httplib::Response &res) { completion(req, res, Route::native); });
  http.Post("/v1/embeddings", [this](const httplib::Request &req, httplib::Response &res) { embeddings(req, res); });
  // Anthropic's clients read their own error shape.
  const auto anthropic_errors = [](httplib::Response &res) {
    if (res.status < 400) return;
    const json e = json::parse(res.body, nullptr, false);
    const std::string message = e.is_object() && e.contains("error") && e["error"].is_object() ? e["error"].value("message", res.body) : res.body;
    reply(res, res.status, anthropic_error(res.status, message));
  };
  http.Post("/v1/messages", [this, anthropic_errors](const httplib::Request &req, httplib::Response &res) {
    completion(req, res, Route::messages);
    anthropic_errors(res);
  });
  http.Post("/v1/messages/count_tokens", [this, anthropic_errors](const httplib::Request &req, httplib::Response &res) {
    completion(req, res, Route::count_tokens);
    anthropic_errors(res);
  });
  http.Post("/infill", [this](const httplib::Request &req, httplib::Response &res) { completion(req, res, Route::infill); });
  http.Post("/tokenize", [this](const httplib::Request &req, httplib::Response &res) {
    const auto L = ready();
    if (!L) return reply(res, 503, error_body(503, "loading the model"));
    json body;
    if (!read_body(req, res, body)) return;
    if (!body.is_object() || !body.contains("content") || !body["content"].is_string())
      return reply(res, 400, error_body(400, "give {\"content\": TEXT} (and \"add_special\": true for BOS)"));
    for (const char *k : {"add_special", "parse_special", "with_pieces"})
      if (body.contains(k) && !body[k].is_boolean()) return reply(res, 400, error_body(400, std::string("'") + k + "' must be true or false"));
    const tokenizer::Tokenizer &tok = L->runner->tokenizer();
    const std::vector<int32_t> ids = tok.encode(body["content"].get<std::string>(), body.value("add_special", false), body.value("parse_special", true));
    if (!body.value("with_pieces", false)) return reply(res, 200, {{"tokens", ids}});
    // llama-server's with_pieces: each token's text, or its bytes where they are no valid UTF-8 alone.
    json pieces = json::array();
    for (const int32_t t : ids) {
      const std::string b = tok.token_bytes(t, /*show_special=*/true);
      pieces.push_back({{"id", t}, {"piece", minfer::utf8::is_valid(b) ? json(b) : byte_list(b)}});
    }
    reply(res, 200, {{"tokens", std::move(pieces)}});
  });
  http.Post("/detokenize", [this](const httplib::Request &req, httplib::Response &res) {
    const auto L = ready();
    if (!L) return reply(res, 503, error_body(503, "loading the model"));
    json body;
    if (!read_body(req, res, body)) return;
    const tokenizer::Tokenizer &tok = L->runner->tokenizer();
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) return reply(res, 400, error_body(400, "give {\"tokens\": [ids]}"));
    std::string text;
    for (const json &t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab())
        return reply(res, 400, error_body(400, "'tokens' holds " + t.dump() + ", not a token id of this model"));
      text += tok.token_bytes(int32_t(t.get<int64_t>()));
    }
    reply(res, 200, {{"content", text}});
  });
  http.Get("/props", [this](const httplib::Request &, httplib::Response &res) {
    const auto L = ready();
    if (!L) return reply(res, 503, error_body(503, "loading the model"));
    // llama-server's fields too (its web UI and tools read default_generation_settings,
    // modalities, the special tokens and build_info): the run config's sampling defaults.
    const tokenizer::Tokenizer &tok = L->runner->tokenizer();
    const auto special = [&tok](int32_t t) { return t >= 0 ? tok.token_bytes(t, /*show_special=*/true) : std::string(); };
    const sampling::Config d = app::sampling_config(cfg.generation);
    const json params = {{"n_predict", cfg.generation.n_predict}, {"seed", d.seed}, {"temperature", d.temperature}, {"top_k", d.top_k},
                         {"top_p", d.top_p}, {"min_p", d.min_p}, {"typical_p", d.typical_p}, {"top_n_sigma", d.top_n_sigma},
                         {"repeat_penalty", d.repeat_penalty}, {"repeat_last_n", d.repeat_last_n}, {"presence_penalty", d.presence_penalty},
                         {"frequency_penalty", d.frequency_penalty}, {"xtc_probability", d.xtc_probability}, {"xtc_threshold", d.xtc_threshold},
                         {"dry_multiplier", d.dry_multiplier}, {"dry_base", d.dry_base}, {"dry_allowed_length", d.dry_allowed_length},
                         {"dry_penalty_last_n", d.dry_penalty_last_n}, {"dry_sequence_breakers", cfg.generation.dry_sequence_breakers},
                         {"mirostat", d.mirostat}, {"mirostat_tau", d.mirostat_tau}, {"mirostat_eta", d.mirostat_eta}, {"stop", cfg.generation.stop}};
    reply(res, 200, {{"model", model_name}, {"model_path", cfg.model}, {"n_ctx", L->runner->n_ctx()}, {"total_slots", opts.parallel},
                     {"chat_template", L->tmpl ? L->tmpl->source() : ""}, {"kv", L->runner->kv_summary()},
                     {"embeddings", L->runner->model().opts.embeddings},
                     {"default_generation_settings", {{"n_ctx", L->runner->n_ctx()}, {"params", params}}},
                     {"modalities", {{"vision", false}, {"audio", false}}}, {"bos_token", special(tok.bos())}, {"eos_token", special(tok.eos())},
                     {"build_info", std::string("minfer ") + MINFER_VERSION}});
  });
  http.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
    const auto L = ready();
    if (!L) return reply(res, 503, error_body(503, "loading the model"));
    const Engine::Stats s = L->engine->stats();
    std::string out;
    const auto metric = [&](const char *name, const char *type, const char *help, double v) {
      char line[256];
      std::snprintf(line, sizeof line, "# HELP minfer:%s %s\n# TYPE minfer:%s %s\nminfer:%s %.17g\n", name, help, name, type, name, v);
      out += line;
    };
    metric("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", double(prompt_tokens.load()));
    metric("tokens_predicted_total", "counter", "Generated tokens.", double(generated.load()));
    metric("requests_total", "counter", "Generation requests accepted.", double(requests.load()));
    metric("requests_processing", "gauge", "Requests running (holding KV pages).", double(s.running));
    metric("requests_waiting", "gauge", "Requests accepted, waiting for room.", double(s.waiting));
    metric("kv_pages_used", "gauge", "KV cache pages held by sequences.", double(s.pool.used));
    metric("kv_pages_free", "gauge", "KV cache pages ready to give out.", double(s.pool.free));
    metric("steps_total", "counter", "Batched steps run.", double(s.steps));
    metric("argmax_rows_total", "counter", "Tokens taken from the backend's arg-max (greedy rows: no logits read).", double(s.argmax_rows));
    metric("logit_rows_total", "counter", "Tokens sampled from logits read back (sampled, logprobs, and refused constrained rows).",
           double(s.logit_rows));
    metric("preemptions_total", "counter", "Sequences preempted under page pressure.", double(s.preemptions));
    metric("prefill_tokens_total", "counter", "Prompt positions run through the model (recomputed ones included).", double(s.prefill_tokens));
    metric("decode_tokens_total", "counter", "Decode tokens run through the model.", double(s.decode_tokens));
    metric("prompt_tokens_seconds", "gauge", "Prefill rate: prompt positions per second of the steps that carried them.",
           s.prefill_step_s > 0 ? double(s.prefill_tokens) / s.prefill_step_s : 0.0);
    metric("predicted_tokens_seconds", "gauge", "Decode rate: decode tokens per second of the steps that carried them.",
           s.decode_step_s > 0 ? double(s.decode_tokens) / s.decode_step_s : 0.0);
    res.set_content(out, "text/plain; version=0.0.4");
  });
  http.set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception &e) {
      what = e.what();
    } catch (...) {
    }
    reply(res, 500, error_body(500, what));
  });
  http.set_error_handler([](const httplib::Request &req, httplib::Response &res) {
    static const std::map<std::string, std::string> kMethods = {
        {"/", "GET"}, {"/health", "GET"}, {"/v1/models", "GET"}, {"/props", "GET"}, {"/metrics", "GET"}, {"/v1/chat/completions", "POST"},
        {"/v1/completions", "POST"}, {"/completion", "POST"}, {"/infill", "POST"}, {"/v1/embeddings", "POST"}, {"/v1/messages", "POST"}, {"/v1/messages/count_tokens", "POST"}, {"/v1/responses", "POST"}, {"/apply-template", "POST"}, {"/tokenize", "POST"}, {"/detokenize", "POST"}};
    if (res.status == 404 && !res.body.empty()) return;  // a route's own 404 (a response or model not here)
    if (res.status == 404) {
      if (const auto it = kMethods.find(req.path); it != kMethods.end() && it->second != req.method) {
        res.set_header("Allow", it->second);
        return reply(res, 405, error_body(405, req.path + " takes " + it->second + ", not " + req.method));
      }
      reply(res, 404, error_body(404, "no such endpoint: " + req.method + " " + req.path));
    } else if (res.status == 413) {
      // cpp-httplib caps form-encoded bodies at 8 KiB: what `curl -d` sends unless told JSON.
      if (req.get_header_value("Content-Type") == "application/x-www-form-urlencoded" && std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) <= kMaxBody)
        return reply(res, 413, error_body(413, "a body sent as application/x-www-form-urlencoded may have 8 KiB at most; send it as JSON "
                                               "with 'Content-Type: application/json' (curl: -H 'Content-Type: application/json')"));
      reply(res, 413, error_body(413, "the request body is over the server's limit (" + std::to_string(kMaxBody >> 20) + " MiB)"));
    } else if (res.status >= 400 && res.body.empty()) {
      reply(res, res.status, error_body(res.status, "the request was refused (HTTP " + std::to_string(res.status) + ")"));
    }
  });
}

int Server::run() {
  Impl &I = *impl_;
  I.routes();
  // Connections wait on generations: enough threads that -np sequences and the probes run.
  const size_t threads = size_t(std::max<int64_t>(8, 2 * I.opts.parallel + 4));
  I.http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  I.http.set_payload_max_length(kMaxBody);
  I.http.set_read_timeout(I.opts.timeout_s);
  I.http.set_write_timeout(I.opts.timeout_s);
  int port = I.opts.port;
  if (port == 0) port = I.http.bind_to_any_port(I.opts.host);
  else if (!I.http.bind_to_port(I.opts.host, port)) port = -1;
  if (port <= 0) {
    std::fprintf(stderr, "minfer-server: cannot listen on %s:%d (in use, or not an address of this machine); pick another --host/--port\n",
                 I.opts.host.c_str(), I.opts.port);
    return 1;
  }
  std::printf("minfer-server listening on http://%s:%d\n", I.opts.host.c_str(), port);
  std::fflush(stdout);
  int rc = 0;
  std::thread loader([&] {
    try {
      auto L = std::make_shared<Loaded>();
      L->runner = std::make_unique<app::ModelRunner>(I.cfg, I.opts.parallel);
      const tokenizer::Tokenizer &tok = L->runner->tokenizer();
      try {
        L->tmpl = std::make_unique<chat::ChatTemplate>(chat::ChatTemplate::for_model(L->runner->file(), tok, I.cfg.chat_template));
        L->tool_format = chat::tool_format_of(L->tmpl->source());
        L->tool_syntax = {L->tool_format, chat::mistral_name_args(L->tmpl->source())};
        L->thinks = chat::template_thinks(L->tmpl->source());
      } catch (const std::exception &e) {
        L->tmpl_error = e.what();
        std::fprintf(stderr, "minfer-server: /v1/chat/completions is off: %s\n", e.what());
      }
      L->max_prompt_bytes = max_prompt_bytes(tok, L->runner->n_ctx());
      {
        L->vocab = sampling::constraint_vocab(tok);
        const std::vector<std::string> &texts = L->vocab->texts;
        // The tool-call constraints also see the call markers that are control tokens
        // ([TOOL_CALLS], <|tool_call|>): a call that opens with one is guarded, and a forced one
        // may write it. Only there: a JSON string of response_format may not hold them.
        std::vector<std::string> call_texts;
        for (const std::string &m : chat::tool_call_markers(L->tool_format))
          for (int32_t t = 0; t < tok.n_vocab(); ++t)
            if (texts[size_t(t)].empty() && tok.token_bytes(t, /*show_special=*/true) == m) {
              if (call_texts.empty()) call_texts = texts;
              call_texts[size_t(t)] = m;
            }
        L->call_vocab = call_texts.empty() ? L->vocab : sampling::constraint_vocab(std::move(call_texts), L->vocab->eog);
      }
      L->engine = std::make_unique<Engine>(L->runner->model(), L->runner->session(), [&tok](int32_t t) { return tok.is_end_of_generation(t); });
      {
        std::lock_guard<std::mutex> lock(I.m);
        I.loaded = L;
      }
      std::fprintf(stderr, "minfer-server: %s loaded in %.2f s; %lld sequences at once, context %lld; %s\n", I.model_name.c_str(),
                   L->runner->load_seconds(), (long long)I.opts.parallel, (long long)L->runner->n_ctx(), L->runner->kv_summary().c_str());
    } catch (const std::exception &e) {
      std::fprintf(stderr, "minfer-server: %s\n", e.what());
      rc = 1;
      I.http.stop();
    }
  });
  const bool listened = I.http.listen_after_bind();
  loader.join();
  I.stopping = true;
  {
    // The engine (and its thread) goes before the connections' last references, then the model.
    std::lock_guard<std::mutex> lock(I.m);
    if (I.loaded) I.loaded->engine.reset();
  }
  return rc ? rc : listened || I.stopping ? 0 : 1;
}

}  // namespace minfer::server
