// Continuous batching's scheduler (core/runtime/scheduler) over a stand-in model whose next
// token is a function of the whole sequence so far: whatever the batching, chunking,
// arrival order and preemptions, each request must get the tokens it gets alone, every
// accepted request must finish once, and every page must come back.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "common/error.hpp"
#include "runtime/page_pool.hpp"
#include "runtime/scheduler.hpp"

namespace {

using minfer::sched::Request;
using minfer::sched::Scheduler;
using minfer::sched::SchedulerLimits;

// The stand-in model: a hash of every token so far (as attention over the whole sequence
// would depend on all of them). Token 3 ends generation.
int32_t next_token(const std::vector<int32_t> &seq) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : seq) h = (h ^ uint64_t(uint32_t(t))) * 1099511628211ull;
  return int32_t(h % 500) + 3;  // 3..502
}
bool is_end(int32_t t) { return t == 3; }

std::vector<int32_t> prompt_of(int64_t id, int32_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) p[size_t(i)] = int32_t((id * 7919 + i * 31) % 400) + 10;
  return p;
}

struct Outcome {
  std::map<int64_t, std::vector<int32_t>> tokens;  // generated, by request
  std::map<int64_t, std::string> reasons;
  int64_t steps = 0, max_step_tokens = 0, max_step_rows = 0;
  std::map<int64_t, std::vector<int64_t>> prompt_rows;  // Request::prompt_rows: the positions given rows, in order
};

// Runs the scheduler to the end; `arrivals[s]` are submitted before step s.
Outcome drive(Scheduler &sch, std::map<int64_t, std::vector<Request>> arrivals) {
  Outcome r;
  std::map<int64_t, std::vector<int32_t>> seqs;  // prompt + generated, as the model sees them
  for (int64_t step = 0; step < 100000; ++step) {
    for (auto &req : arrivals[step]) {
      seqs[req.id] = req.prompt;
      sch.submit(req);
    }
    arrivals.erase(step);
    const auto plan = sch.plan();
    if (plan.empty() && arrivals.empty() && sch.waiting() == 0) break;
    std::vector<int32_t> sampled;
    for (const auto &item : plan.items) {
      // The step must carry exactly the sequence's tokens at those positions.
      const auto &s = seqs[item.seq];
      for (size_t i = 0; i < item.tokens.size(); ++i) EXPECT_EQ(item.tokens[i], s[size_t(item.pos) + i]) << "seq " << item.seq;
      if (item.wants_logits) {
        EXPECT_EQ(size_t(item.pos) + item.tokens.size(), s.size());
        const int32_t t = next_token(s);
        sampled.push_back(t);
        if (!is_end(t)) seqs[item.seq].push_back(t);
      }
    }
    r.max_step_tokens = std::max(r.max_step_tokens, plan.n_tokens);
    int64_t rows = 0;
    for (const auto &item : plan.items) {
      rows += item.rows();
      for (int64_t i = 0; i < item.prompt_rows; ++i) r.prompt_rows[item.seq].push_back(item.pos + i);
    }
    r.max_step_rows = std::max(r.max_step_rows, rows);
    sch.complete(plan, sampled, is_end);
    for (auto &f : sch.take_finished()) {
      EXPECT_FALSE(r.reasons.count(f.id)) << "request " << f.id << " finished twice";
      r.tokens[f.id] = f.tokens;
      r.reasons[f.id] = f.reason;
    }
    ++r.steps;
  }
  return r;
}

std::vector<int32_t> solo(const Request &req) {
  minfer::kv::PagePool pool(64, 16);
  Scheduler sch(pool, {512, 1, 4096});
  return drive(sch, {{0, {req}}}).tokens.at(req.id);
}

TEST(Scheduler, ManySequencesGetTheTokensTheyGetAlone) {
  std::mt19937 rng(5);
  std::map<int64_t, std::vector<Request>> arrivals;
  std::vector<Request> all;
  for (int64_t id = 0; id < 32; ++id) {
    Request r{id, prompt_of(id, int32_t(5 + rng() % 120)), int64_t(1 + rng() % 40)};
    arrivals[int64_t(rng() % 30)].push_back(r);  // joining at different steps
    all.push_back(r);
  }
  minfer::kv::PagePool pool(512, 16);
  Scheduler sch(pool, {64, 16, 4096});  // small steps: prompts run in chunks beside decodes
  const Outcome run = drive(sch, arrivals);
  ASSERT_EQ(run.tokens.size(), all.size());
  for (const Request &r : all) EXPECT_EQ(run.tokens.at(r.id), solo(r)) << "request " << r.id;
  EXPECT_LE(run.max_step_tokens, 64);
  EXPECT_EQ(pool.stats().used, 0) << "every page back";
}

TEST(Scheduler, APoolTooSmallPreemptsAndStillCompletesEveryone) {
  std::vector<Request> reqs;
  for (int64_t id = 0; id < 8; ++id) reqs.push_back({id, prompt_of(id, 40), 60});
  minfer::kv::PagePool pool(24, 16);  // 8 sequences of up to 100 positions need 56 pages
  Scheduler sch(pool, {128, 8, 4096});
  const Outcome run = drive(sch, {{0, reqs}});
  EXPECT_GT(sch.preemptions(), 0);
  for (const Request &r : reqs) {
    EXPECT_EQ(run.tokens.at(r.id), solo(r)) << "request " << r.id;
    EXPECT_TRUE(run.reasons.at(r.id) == "length" || run.reasons.at(r.id) == "stop");
  }
  EXPECT_EQ(pool.stats().used, 0);
}

TEST(Scheduler, ASharedPrefixIsComputedOnce) {
  std::vector<int32_t> common = prompt_of(99, 200);
  Request a{1, common, 4}, b{2, common, 4};
  a.prompt.push_back(11), b.prompt.push_back(12);
  minfer::kv::PagePool pool(64, 16);
  Scheduler sch(pool, {512, 4, 4096});
  const Outcome run = drive(sch, {{0, {a}}, {3, {b}}});  // b arrives once a's prompt is in the cache
  EXPECT_EQ(sch.reused_positions(), 192) << "b reuses a's 12 full pages";
  EXPECT_EQ(run.tokens.at(1), solo(a));
  EXPECT_EQ(run.tokens.at(2), solo(b));
}

// Request::prompt_rows: every prompt position before the last gets a logit row, once, in
// order; its chunks are cut to the rows a step has left (decode tokens first), and the other
// requests get the tokens they get alone.
TEST(Scheduler, PromptRowsFitTheStepsRows) {
  minfer::kv::PagePool pool(64, 16);
  Scheduler sch(pool, {64, 4, 4096, /*max_rows=*/3});
  std::map<int64_t, std::vector<Request>> arrivals;
  Request scored{7, prompt_of(7, 40), 2, true};
  arrivals[0] = {{1, prompt_of(1, 5), 30}, {2, prompt_of(2, 9), 30}, {8, prompt_of(7, 40), 1}};
  arrivals[20] = {scored};  // the same prompt as request 8, whose full pages are in the pool by then
  const Outcome r = drive(sch, arrivals);
  std::vector<int64_t> want(39);
  for (int64_t i = 0; i < 39; ++i) want[size_t(i)] = i;
  EXPECT_EQ(r.prompt_rows.at(7), want);
  EXPECT_LE(r.max_step_rows, 3);
  EXPECT_FALSE(r.prompt_rows.count(1));
  for (int64_t id : {1, 2}) EXPECT_EQ(r.tokens.at(id), solo({id, prompt_of(id, id == 1 ? 5 : 9), 30})) << id;
  EXPECT_EQ(r.tokens.at(7), solo({7, prompt_of(7, 40), 2}));
  EXPECT_EQ(r.tokens.at(8), solo({8, prompt_of(7, 40), 1}));
  // Request 7's prompt is request 8's, whose pages are in the pool when 7 comes: unscored it
  // would share them; scored it computes every position (the prompt rows above are all there).
  EXPECT_EQ(sch.reused_positions(), 0);
  minfer::kv::PagePool pool2(64, 16);
  Scheduler plain(pool2, {64, 4, 4096, 3});
  arrivals[20] = {{7, prompt_of(7, 40), 2}};
  drive(plain, arrivals);
  EXPECT_GT(plain.reused_positions(), 0) << "unscored, the same request shares request 8's pages";
}

TEST(Scheduler, CancelAndRefusals) {
  minfer::kv::PagePool pool(16, 16);
  Scheduler sch(pool, {32, 1, 128});
  sch.submit({1, prompt_of(1, 20), 50});
  sch.submit({2, prompt_of(2, 20), 50});
  auto plan = sch.plan();  // 1 runs (one slot), 2 waits
  EXPECT_EQ(sch.running(), 1u);
  EXPECT_EQ(sch.waiting(), 1u);
  sch.cancel(2);
  sch.cancel(1);
  sch.complete(plan, {}, is_end);
  const auto done = sch.take_finished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].reason, "cancelled");
  EXPECT_EQ(pool.stats().used, 0) << "a cancelled sequence's pages return at once";
  EXPECT_THROW(sch.submit({3, prompt_of(3, 100), 50}), minfer::Error) << "150 positions in a context of 128";
  EXPECT_THROW(sch.submit({4, {}, 5}), minfer::Error);
  try {
    minfer::kv::PagePool tiny(2, 16);
    Scheduler s2(tiny, {32, 1, 4096});
    s2.submit({5, prompt_of(5, 40), 10});
    FAIL();
  } catch (const minfer::Error &e) {
    EXPECT_NE(std::string(e.what()).find("needs 4 KV pages; the whole pool has 2"), std::string::npos) << e.what();
  }
}

}  // namespace
