// The engine thread (core/runtime/engine) as a server's connections use it: requests from
// several threads at once, each stream ending exactly once; cancellation returns pages at
// once; a full inbox refuses; requests that can never fit end with the numbers; shutting down
// with work in flight ends every stream. Every wait is bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/run_config.hpp"
#include "models/model.hpp"
#include "runtime/engine.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"
#include "test_util.hpp"

namespace {

struct Loaded {
  std::unique_ptr<minfer::models::Model> model;
  std::unique_ptr<minfer::BackendSet> backends;
  std::unique_ptr<minfer::Session> session;
};

// stories260K on the CPU, built for `seqs` sequences.
Loaded load(int64_t seqs, int64_t kv_pages = 0) {
  Loaded l;
  auto file = minfer::gguf::File::open(minfer::test::testdata_dir() + "/models/stories260K.gguf");
  minfer::models::BuildOptions bo;
  bo.n_ctx = 256, bo.max_batch = 64, bo.max_seqs = seqs, bo.kv_pages = kv_pages;
  l.model = minfer::models::load_model(file, bo);
  const minfer::RunConfig cfg = minfer::parse_run_config("backends: {cpu: {threads: 2}}\n", "test.yaml");
  l.backends = std::make_unique<minfer::BackendSet>(minfer::open_backends(cfg));
  l.session = std::make_unique<minfer::Session>(l.model->graph, cfg, *l.backends);
  return l;
}

minfer::SeqRequest greedy(int64_t id, std::vector<int32_t> prompt, int64_t max_tokens) {
  minfer::SeqRequest r{id, std::move(prompt), max_tokens, {}};
  r.sampling.temperature = 0;
  return r;
}

// Reads a stream to its end (at most `limit_ms` in all): the tokens and the reason.
std::pair<std::vector<int32_t>, std::string> drain(minfer::RequestStream &s, int64_t limit_ms = 60000) {
  std::vector<int32_t> tokens;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (std::chrono::steady_clock::now() < until)
    if (auto e = s.next(100)) {
      if (e->end) return {tokens, e->reason};
      tokens.push_back(e->token);
    }
  return {tokens, "timed out"};
}

bool never_ends(int32_t) { return false; }

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (minfer::test::testdata_dir().empty()) GTEST_SKIP() << "../shared/testdata not found";
  }
};

TEST_F(EngineTest, RequestsFromManyThreadsGetLlamaCppsGreedyTokens) {
  std::ifstream in(minfer::test::testdata_dir() + "/reference/stories260K.greedy.jsonl");
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> refs;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) {
      const auto j = nlohmann::json::parse(line);
      refs.push_back({j["prompt_tokens"].get<std::vector<int32_t>>(), j["greedy_tokens"].get<std::vector<int32_t>>()});
    }
  Loaded l = load(3);  // three slots for twelve requests: some wait their turn
  minfer::Engine engine(*l.model, *l.session, never_ends);
  std::atomic<int> good{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int k = 0; k < 3; ++k) {
        const auto &[prompt, want] = refs[size_t((c + k) % refs.size())];
        auto s = engine.submit(greedy(c * 10 + k, prompt, int64_t(want.size())));
        if (!s) continue;
        const auto [got, reason] = drain(*s);
        if (got == want && reason == "length") ++good;
      }
    });
  for (auto &t : clients) t.join();
  EXPECT_EQ(good.load(), 12) << "every request: llama.cpp's greedy tokens, then 'length'";
  EXPECT_EQ(engine.stats().pool.used, 0) << "every page back";
}

TEST_F(EngineTest, CancellingReturnsThePagesAtOnce) {
  Loaded l = load(2);
  minfer::Engine engine(*l.model, *l.session, never_ends);
  auto s = engine.submit(greedy(1, {1, 403, 407, 261, 378}, 200));
  ASSERT_TRUE(s);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->next(10000)) << "tokens arrive";
  engine.cancel(1);
  const auto [rest, reason] = drain(*s, 10000);
  EXPECT_EQ(reason, "cancelled");
  EXPECT_LT(rest.size(), 195u);
  for (int i = 0; i < 100 && engine.stats().pool.used != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.stats().pool.used, 0);
  // The engine goes on: a new request runs to its end.
  auto again = engine.submit(greedy(2, {1, 403, 407, 261, 378}, 8));
  ASSERT_TRUE(again);
  EXPECT_EQ(drain(*again).second, "length");
}

TEST_F(EngineTest, RequestsThatCanNeverFitEndWithTheNumbers) {
  Loaded l = load(2);
  minfer::Engine engine(*l.model, *l.session, never_ends);
  const minfer::SeqRequest big = greedy(1, std::vector<int32_t>(200, 300), 100);
  const std::string why = engine.check(big);
  EXPECT_NE(why.find("need 300 positions; the context holds 256"), std::string::npos) << why;
  auto s = engine.submit(big);
  ASSERT_TRUE(s);
  const auto [tokens, reason] = drain(*s, 10000);
  EXPECT_TRUE(tokens.empty());
  EXPECT_EQ(reason, "error: " + why);
  EXPECT_NE(engine.check(greedy(2, {}, 5)), "");
}

TEST_F(EngineTest, AFullInboxRefusesAndShuttingDownEndsEveryStream) {
  Loaded l = load(1);
  std::vector<std::shared_ptr<minfer::RequestStream>> accepted;
  int refused = 0;
  {
    minfer::Engine engine(*l.model, *l.session, never_ends, {2});
    for (int i = 0; i < 20; ++i) {
      auto s = engine.submit(greedy(i, {1, 403, 407, 261, 378}, 200));
      if (s) accepted.push_back(s);
      else ++refused;
    }
    EXPECT_GT(refused, 0) << "an inbox of 2 refuses most of 20 requests sent at once";
  }  // the engine stops with work in flight
  for (auto &s : accepted) {
    const auto reason = drain(*s, 1000).second;
    EXPECT_TRUE(reason == "cancelled" || reason == "length") << reason;
  }
}

}  // namespace

TEST_F(EngineTest, LogprobsComeWithTheTokensOfTheRequestsThatAskForThem) {
  std::ifstream in(minfer::test::testdata_dir() + "/reference/stories260K.greedy.jsonl");
  std::string line;
  std::getline(in, line);
  const auto j = nlohmann::json::parse(line);
  const auto prompt = j["prompt_tokens"].get<std::vector<int32_t>>();
  const auto want = j["greedy_tokens"].get<std::vector<int32_t>>();
  Loaded l = load(2);
  minfer::Engine engine(*l.model, *l.session, never_ends);
  minfer::SeqRequest asks = greedy(1, prompt, int64_t(want.size()));
  asks.logprobs = 3;
  auto with = engine.submit(asks), without = engine.submit(greedy(2, prompt, int64_t(want.size())));
  ASSERT_TRUE(with && without);
  std::vector<int32_t> got;
  for (int waits = 0; waits < 600; ++waits) {
    const auto e = with->next(100);
    if (!e) continue;
    if (e->end) break;
    got.push_back(e->token);
    ASSERT_TRUE(e->logprobs) << "token " << got.size() << " has no logprobs";
    const minfer::sampling::TokenLogprobs &lp = *e->logprobs;
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.token, e->token);
    EXPECT_EQ(lp.top[0].first, e->token) << "greedy: the likeliest token is the one sampled";
    EXPECT_FLOAT_EQ(lp.logprob, lp.top[0].second);
    EXPECT_LE(lp.logprob, 0.0f);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
    EXPECT_GE(lp.top[1].second, lp.top[2].second);
    double p = 0;
    for (const auto &[t, v] : lp.top) p += std::exp(double(v));
    EXPECT_LE(p, 1.0 + 1e-5);
  }
  EXPECT_EQ(got, want) << "asking for logprobs does not change the tokens";
  for (int waits = 0; waits < 600; ++waits)
    if (const auto e = without->next(100)) {
      if (e->end) break;
      EXPECT_FALSE(e->logprobs) << "a request that did not ask gets none";
    }
  const minfer::Engine::Stats st = engine.stats();
  EXPECT_GE(st.prefill_tokens, int64_t(prompt.size()));
  EXPECT_GT(st.decode_tokens, 0);
  EXPECT_GT(st.prefill_step_s, 0.0);
  EXPECT_GT(st.decode_step_s, 0.0);
}
