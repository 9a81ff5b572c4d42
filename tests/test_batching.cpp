// Many sequences at once (core/runtime/batch_session): the scheduler's steps over the paged
// KV cache on real models must give each sequence the tokens it gets alone.
//   - stories260K: llama.cpp's greedy tokens for the four reference prompts, run as one batch
//     (CPU, CUDA, mixed placement);
//   - synthetic Qwen2 of several weight types: 1, 7 and 32 sequences of different prompt
//     lengths that join and finish at different steps, each against its solo run (the
//     single-sequence Generator); a pool too small for all of them (preemptions); two
//     sequences sharing a 200-token prefix (one prefix's pages, asserted from the accounting).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <ostream>
#include <span>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "config/run_config.hpp"
#include "models/model.hpp"
#include "runtime/batch_session.hpp"
#include "runtime/generator.hpp"
#include "runtime/placement.hpp"
#include "runtime/plugin.hpp"
#include "runtime/session.hpp"
#include "sampling/json_constraint.hpp"
#include "sampling/sampler.hpp"
#include "synth/synth.hpp"
#include "test_util.hpp"

namespace {

minfer::sampling::Config greedy() {
  minfer::sampling::Config c;
  c.temperature = 0;
  return c;
}

bool never_ends(int32_t) { return false; }

// Runs steps until every request finished (bounded: a stuck scheduler fails, never hangs).
// arrivals[i]: the step before which request i is submitted.
std::map<int64_t, std::vector<int32_t>> run_all(minfer::BatchSession &b, const std::vector<minfer::SeqRequest> &reqs,
                                                const std::vector<int64_t> &arrivals,
                                                const std::function<void(int64_t step)> &after_step = {}, int64_t max_steps = 20000) {
  std::map<int64_t, std::vector<int32_t>> got;
  size_t submitted = 0, done = 0;
  for (int64_t step = 0; done < reqs.size(); ++step) {
    if (step >= max_steps) {
      ADD_FAILURE() << "not finished after " << max_steps << " steps";
      break;
    }
    for (size_t i = 0; i < reqs.size(); ++i)
      if (arrivals[i] == step) b.submit(reqs[i]), ++submitted;
    for (const minfer::SeqToken &t : b.step()) got[t.id].push_back(t.token);
    if (after_step) after_step(step);
    for (const minfer::sched::Finished &f : b.take_finished()) {
      EXPECT_EQ(f.tokens, got[f.id]) << "request " << f.id << ": the streamed tokens and the finished ones differ";
      EXPECT_EQ(f.reason, "length") << "request " << f.id;
      ++done;
    }
  }
  EXPECT_TRUE(b.idle());
  EXPECT_EQ(b.pool().stats().used, 0) << "every page returns when its sequences end";
  return got;
}

// ---- stories260K: llama.cpp's greedy tokens, four prompts in one batch -----------------------

struct Backends {
  const char *yaml, *label;
};
void PrintTo(const Backends &b, std::ostream *os) { *os << b.label; }
class StoriesBatch : public ::testing::TestWithParam<Backends> {
 protected:
  void SetUp() override {
    td = minfer::test::testdata_dir();
    if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
    cfg = minfer::parse_run_config(GetParam().yaml, "test.yaml");
    std::string why;
    if (!minfer::test::backends_usable(cfg, why)) GTEST_SKIP() << GetParam().label << ": " << why;
  }
  // The four reference prompts with llama.cpp's greedy tokens (stories260K.greedy.jsonl).
  std::vector<nlohmann::json> references() const {
    std::ifstream in(td + "/reference/stories260K.greedy.jsonl");
    std::vector<nlohmann::json> refs;
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) refs.push_back(nlohmann::json::parse(line));
    return refs;
  }
  // stories260K built for four sequences (embeddings: with its hidden states as an output) and
  // a session over it on the parameter's backends.
  void load(bool embeddings = false) {
    file = minfer::gguf::File::open(td + "/models/stories260K.gguf");
    bo.n_ctx = 256, bo.max_batch = 64, bo.max_seqs = 4, bo.embeddings = embeddings;
    model = minfer::models::load_model(file, bo);
    backends = minfer::open_backends(cfg);
    session = std::make_unique<minfer::Session>(model->graph, cfg, backends);
  }
  std::string td;
  minfer::RunConfig cfg;
  std::shared_ptr<minfer::gguf::File> file;
  minfer::models::BuildOptions bo;
  std::unique_ptr<minfer::models::Model> model;
  minfer::BackendSet backends;
  std::unique_ptr<minfer::Session> session;  // last: it goes first
};

TEST_P(StoriesBatch, FourPromptsTogetherGiveLlamaCppsGreedyTokens) {
  std::vector<minfer::SeqRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (const nlohmann::json &j : references()) {
    want.push_back(j["greedy_tokens"].get<std::vector<int32_t>>());
    reqs.push_back({int64_t(reqs.size()), j["prompt_tokens"].get<std::vector<int32_t>>(), int64_t(want.back().size()), greedy()});
  }
  ASSERT_EQ(reqs.size(), 4u);
  load();
  minfer::BatchSession batch(*model, *session, never_ends);
  const auto got = run_all(batch, reqs, {0, 0, 0, 0});
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got.at(int64_t(i)), want[i]) << GetParam().label << ": prompt " << i;
  EXPECT_EQ(batch.stats().most_seqs, 4) << "the four ran in the same steps";
  EXPECT_EQ(batch.stats().greedy_steps, batch.stats().steps) << "greedy sequences take the backend's arg-max, not the logits";
}

// A constraint allowing even token ids only: the arg-max is refused about half the time.
class EvenTokens : public minfer::sampling::TokenConstraint {
 public:
  bool allows(int32_t t) const override { return t % 2 == 0; }
  void accept(int32_t t) override { EXPECT_EQ(t % 2, 0) << "an odd token was taken"; }
  std::unique_ptr<TokenConstraint> fresh() const override { return std::make_unique<EvenTokens>(); }
};

// A step reads the logits of the rows that need them only: a greedy row takes the backend's
// arg-max, so does a greedy row under a constraint that allows it; a sampled row, one asking
// for logprobs and a refused constrained row read their own row. The tokens are those of the
// same batch with every row's logits read.
TEST_P(StoriesBatch, OnlyTheRowsThatNeedTheirLogitsReadThem) {
  std::vector<std::vector<int32_t>> prompts;
  for (const nlohmann::json &j : references()) prompts.push_back(j["prompt_tokens"].get<std::vector<int32_t>>());
  ASSERT_EQ(prompts.size(), 4u);
  load();
  minfer::sampling::Config even = greedy(), warm;
  even.constraint = std::make_shared<EvenTokens>();
  warm.temperature = 0.8f, warm.seed = 7;
  const int64_t n = 24;
  std::vector<minfer::SeqRequest> reqs{{0, prompts[0], n, greedy()}, {1, prompts[1], n, even}, {2, prompts[2], n, warm},
                                       {3, prompts[3], n, greedy(), 2}};
  const auto run = [&](bool read_all, minfer::BatchStats &stats) {
    minfer::BatchSession batch(*model, *session, never_ends);
    if (read_all) batch.on_logits([](int64_t, std::span<const float>) {});  // every row's logits, as before
    const auto got = run_all(batch, reqs, {0, 0, 0, 0});
    stats = batch.stats();
    return got;
  };
  minfer::BatchStats all{}, some{};
  const auto want = run(true, all), got = run(false, some);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(got.at(i), want.at(i)) << GetParam().label << ": request " << i;
  for (int32_t t : got.at(1)) EXPECT_EQ(t % 2, 0) << "the constraint holds";
  EXPECT_EQ(all.argmax_rows, 0);
  EXPECT_EQ(all.logit_rows, 4 * n);
  EXPECT_EQ(some.argmax_rows + some.logit_rows, 4 * n);
  // Requests 2 (sampled) and 3 (logprobs) read every row; request 0 none; request 1 those
  // whose arg-max was odd: some, not all.
  EXPECT_GT(some.logit_rows, 2 * n) << "a refused arg-max reads its row";
  EXPECT_LT(some.logit_rows, 3 * n) << "an allowed arg-max reads nothing";
}

// The prompt's log-probabilities (SeqRequest::prompt_logprobs, completions' echo): each prompt
// token after the first, given the tokens before it. A greedy run's tokens with their
// logprobs, then that prompt + those tokens as one prompt: its last entries are the run's own.
// The prompt's rows share the step's four logit rows with three other requests, whose tokens
// stay llama.cpp's.
TEST_P(StoriesBatch, PromptLogprobsAreEachTokensGivenItsPrefix) {
  const std::vector<nlohmann::json> refs = references();
  ASSERT_EQ(refs.size(), 4u);
  load();
  const std::vector<int32_t> prompt = refs[0]["prompt_tokens"].get<std::vector<int32_t>>();
  std::vector<int32_t> gen;
  std::vector<minfer::sampling::TokenLogprobs> gen_lp;
  {
    minfer::BatchSession solo(*model, *session, never_ends);
    solo.submit({0, prompt, 20, greedy(), 2});
    for (int step = 0; step < 200 && !solo.idle(); ++step)
      for (const minfer::SeqToken &t : solo.step()) gen.push_back(t.token), gen_lp.push_back(*t.logprobs);
  }
  ASSERT_EQ(gen.size(), 20u);
  std::vector<int32_t> whole = prompt;
  whole.insert(whole.end(), gen.begin(), gen.end());
  minfer::BatchSession batch(*model, *session, never_ends);
  minfer::SeqRequest scored{9, whole, 1, greedy()};
  scored.prompt_logprobs = 2;
  batch.submit(scored);
  for (int i = 1; i < 4; ++i)
    batch.submit({i, refs[size_t(i)]["prompt_tokens"].get<std::vector<int32_t>>(), int64_t(refs[size_t(i)]["greedy_tokens"].size()), greedy()});
  std::map<int64_t, std::vector<int32_t>> got;
  std::vector<minfer::SeqToken> scores;
  for (int step = 0; step < 2000 && !batch.idle(); ++step)
    for (const minfer::SeqToken &t : batch.step()) {
      if (t.prompt) {
        EXPECT_EQ(t.id, 9);
        scores.push_back(t);
      } else {
        EXPECT_TRUE(scores.size() == whole.size() - 1 || t.id != 9) << "the prompt's entries come before its token";
        got[t.id].push_back(t.token);
      }
    }
  ASSERT_TRUE(batch.idle());
  ASSERT_EQ(scores.size(), whole.size() - 1) << "one entry for each prompt token after the first, once";
  for (size_t i = 0; i < scores.size(); ++i) {
    EXPECT_EQ(scores[i].token, whole[i + 1]);
    ASSERT_TRUE(scores[i].logprobs);
    EXPECT_EQ(scores[i].logprobs->top.size(), 2u);
    EXPECT_LE(scores[i].logprobs->logprob, 0.0f);
  }
  for (size_t k = 0; k < gen.size(); ++k) {
    const minfer::sampling::TokenLogprobs &a = *scores[prompt.size() - 1 + k].logprobs, &b = gen_lp[k];
    EXPECT_NEAR(a.logprob, b.logprob, 2e-3) << GetParam().label << ": generated token " << k;
    EXPECT_EQ(a.top[0].first, b.top[0].first) << "the greedy token is the likeliest either way";
  }
  for (int i = 1; i < 4; ++i) EXPECT_EQ(got[i], refs[size_t(i)]["greedy_tokens"].get<std::vector<int32_t>>()) << GetParam().label << ": request " << i;
  EXPECT_EQ(got[9].size(), 1u);
  EXPECT_GE(batch.stats().steps, int64_t(whole.size() - 1) / 4) << "four logit rows a step";
}

// Embed requests (SeqRequest::embed): the prompt's last hidden state after the final norm, the
// very vector the output matmul turns into that position's logits; the same batched or alone;
// no token comes back.
TEST_P(StoriesBatch, EmbeddingsAreTheHiddenStateTheLogitsComeFrom) {
  std::vector<std::vector<int32_t>> prompts;
  for (const nlohmann::json &j : references()) prompts.push_back(j["prompt_tokens"].get<std::vector<int32_t>>());
  load(/*embeddings=*/true);
  minfer::BatchSession batch(*model, *session, never_ends);
  std::map<int64_t, std::vector<float>> logits, embedding;
  batch.on_logits([&](int64_t id, std::span<const float> row) { logits[id].assign(row.begin(), row.end()); });
  minfer::SeqRequest e0{0, prompts[0], 1, greedy()}, t0{1, prompts[0], 1, greedy()}, e1{2, prompts[1], 1, greedy()};
  e0.embed = e1.embed = true;
  std::map<int64_t, std::string> ended;
  auto run = [&](std::vector<minfer::SeqRequest> reqs) {
    for (const auto &r : reqs) batch.submit(r);
    for (int step = 0; step < 100 && !batch.idle(); ++step) {
      for (const minfer::SeqToken &t : batch.step()) {
        if (!t.embedding.empty()) embedding[t.id] = t.embedding;
        EXPECT_EQ(t.token < 0, !t.embedding.empty()) << "an embedding or a token";
      }
      for (const auto &f : batch.take_finished()) ended[f.id] = f.reason;
    }
  };
  run({e0, t0, e1});
  ASSERT_EQ(embedding.size(), 2u);
  ASSERT_EQ(embedding[0].size(), 64u) << "n_embd values";
  EXPECT_EQ(ended[0], "length");
  EXPECT_EQ(ended[2], "length");
  // logits[v] = sum_i output[v][i] * hidden[i], with the file's own output weights.
  const minfer::gguf::TensorInfo *out = file->find_tensor("output.weight");
  ASSERT_TRUE(out && out->dtype == MINFER_DTYPE_F32 && out->shape[0] == 64);
  const float *w = reinterpret_cast<const float *>(out->data);
  ASSERT_EQ(logits[1].size(), size_t(out->shape[1]));
  double worst = 0;
  for (int64_t v = 0; v < out->shape[1]; ++v) {
    double dot = 0;
    for (int64_t i = 0; i < 64; ++i) dot += double(w[v * 64 + i]) * embedding[0][size_t(i)];
    worst = std::max(worst, std::abs(dot - logits[1][size_t(v)]) / (1 + std::abs(dot)));
  }
  EXPECT_LT(worst, 1e-3) << "the embedding times the output weights gives the same prompt's logits";
  const std::vector<float> batched = embedding[0];
  embedding.clear();
  minfer::SeqRequest alone = e0;
  alone.id = 3;
  run({alone});
  ASSERT_EQ(embedding[3].size(), 64u);
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(embedding[3][i], batched[i], 1e-4f) << "alone as batched, value " << i;
  EXPECT_GT(std::abs(embedding[3][0] - 0.0f) + std::abs(embedding[3][1]), 0.0f);
  EXPECT_EQ(batch.pool().stats().used, 0);

  minfer::models::BuildOptions plain = bo;
  plain.embeddings = false;
  const auto without = minfer::models::load_model(file, plain);
  minfer::Session s2(without->graph, cfg, backends);
  minfer::BatchSession b2(*without, s2, never_ends);
  try {
    b2.submit(e0);
    ADD_FAILURE() << "an embed request on a model built without its hidden states";
  } catch (const minfer::Error &e) {
    EXPECT_NE(std::string(e.what()).find("--embeddings"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StoriesBatch,
                         ::testing::Values(Backends{"backends: {cpu: {threads: 2}}\n", "cpu"}, Backends{"backends: {cuda: {}}\n", "cuda"},
                                           Backends{"backends: {cpu: {threads: 2}, cuda: {}}\nplacement:\n  default: cpu\n  rules:\n"
                                                    "    - {match: 'token_embd', backend: cuda}\n    - {match: 'blk.[01].*', backend: cuda}\n",
                                                    "mixed"}),
                         [](const auto &info) { return std::string(info.param.label); });

// ---- synthetic Qwen2: batched against solo ---------------------------------------------------

std::string synth_model(const std::string &type) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / ("minfer-batch-tiny-" + type + ".gguf");
  if (!std::filesystem::exists(path)) {
    minfer::synth::Options o;
    o.arch = "qwen2", o.preset = "tiny", o.type = type, o.seed = 11, o.out = path.string();
    minfer::synth::synthesize(o);
  }
  return path.string();
}

// Prompts of different lengths (token ids within the tiny vocabulary), with a shared prefix
// when `prefix` > 0.
std::vector<int32_t> prompt(int64_t id, int64_t length, int64_t prefix = 0) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < length; ++i) p.push_back(int32_t(((i < prefix ? 0 : id + 1) * 7919 + i * 131) % 1000) + 1);
  return p;
}

struct SynthCase {
  std::string type, backends, label;
};

void PrintTo(const SynthCase &c, std::ostream *os) { *os << c.label; }

class SynthBatch : public ::testing::TestWithParam<SynthCase> {
 protected:
  void SetUp() override {
    cfg_ = minfer::parse_run_config(GetParam().backends, "test.yaml");
    std::string why;
    if (!minfer::test::backends_usable(cfg_, why)) GTEST_SKIP() << GetParam().label << ": " << why;
    file_ = minfer::gguf::File::open(synth_model(GetParam().type));
    backends_ = std::make_unique<minfer::BackendSet>(minfer::open_backends(cfg_));
  }

  // The greedy tokens of one sequence alone (the single-sequence Generator).
  std::vector<int32_t> solo(const minfer::SeqRequest &r) {
    if (!solo_) {
      minfer::models::BuildOptions bo;
      bo.n_ctx = 512, bo.max_batch = 64;
      solo_model_ = minfer::models::load_model(file_, bo);
      solo_ = std::make_unique<minfer::Session>(solo_model_->graph, cfg_, *backends_);
    }
    minfer::Generator gen(*solo_model_, *solo_);
    minfer::sampling::Sampler s(r.sampling);
    std::vector<int32_t> history = r.prompt, out;
    std::vector<float> logits = gen.feed(r.prompt);
    std::vector<std::vector<float>> &steps = solo_logits_[r.id];
    steps.clear();
    for (int64_t i = 0; i < r.max_tokens; ++i) {
      steps.push_back(logits);
      out.push_back(s.sample(logits.data(), int64_t(logits.size()), history));
      history.push_back(out.back());
      if (i + 1 < r.max_tokens) logits = gen.feed({out.back()});
    }
    return out;
  }

  std::unique_ptr<minfer::Session> batched(int64_t max_seqs, int64_t kv_pages, std::unique_ptr<minfer::models::Model> &model) {
    minfer::models::BuildOptions bo;
    bo.n_ctx = 512, bo.max_batch = 64, bo.max_seqs = max_seqs, bo.kv_pages = kv_pages;
    model = minfer::models::load_model(file_, bo);
    return std::make_unique<minfer::Session>(model->graph, cfg_, *backends_);
  }

  // Each sequence's greedy tokens equal its solo run's. The CPU runs one-token and many-token
  // steps with different matmul kernels (activations rounded differently), so, as TESTING.md's
  // clear-position rule says, a step may differ only where the solo run's top-2 margin is
  // within twice the two runs' largest logit difference there; that sequence's comparison
  // stops at it (the runs continue from different tokens). Before it, the logits stay within
  // 10% of their RMS.
  // Returns the largest difference, relative to the logits' RMS.
  double expect_solo(const std::vector<minfer::SeqRequest> &reqs, const std::map<int64_t, std::vector<int32_t>> &got) {
    int64_t whole = 0;
    double worst = 0;
    for (const auto &r : reqs) {
      const std::vector<int32_t> want = solo(r), &have = got.at(r.id);
      const auto &mine = solo_logits_.at(r.id), &theirs = batch_logits_[r.id];
      if (have.size() != want.size() || theirs.size() != want.size()) {
        ADD_FAILURE() << "request " << r.id << ": " << have.size() << " tokens and " << theirs.size() << " logit rows, solo " << want.size();
        continue;
      }
      size_t i = 0;
      for (; i < want.size(); ++i) {
        double diff = 0, sq = 0;
        for (size_t v = 0; v < mine[i].size(); ++v) diff = std::max(diff, std::fabs(double(mine[i][v]) - theirs[i][v])), sq += double(mine[i][v]) * mine[i][v];
        const double rms = std::sqrt(sq / double(mine[i].size()));
        worst = std::max(worst, diff / rms);
        EXPECT_LT(diff, 0.1 * rms) << GetParam().label << ": request " << r.id << " step " << i;
        if (want[i] != have[i]) {
          EXPECT_LE(top2_margin(mine[i]), 2 * diff) << GetParam().label << ": request " << r.id << " (prompt " << r.prompt.size()
                                                     << ") leaves its solo tokens at step " << i << " of " << want.size()
                                                     << " where the solo run's choice was clear";
          break;
        }
      }
      whole += i == want.size();
    }
    std::printf("%s: %lld of %zu sequences equal their solo runs token for token (the rest up to a near-tie); max |batched - solo| / rms(logits) = %.3g\n",
                GetParam().label.c_str(), (long long)whole, reqs.size(), worst);
    return worst;
  }

  // A batched session whose sampled logits are kept per request.
  std::unique_ptr<minfer::BatchSession> batch(minfer::models::Model &model, minfer::Session &session) {
    auto b = std::make_unique<minfer::BatchSession>(model, session, never_ends);
    batch_logits_.clear();
    b->on_logits([this](int64_t id, std::span<const float> l) { batch_logits_[id].emplace_back(l.begin(), l.end()); });
    return b;
  }

  static double top2_margin(const std::vector<float> &l) {
    float a = -INFINITY, b = -INFINITY;
    for (float x : l)
      if (x > a) b = a, a = x;
      else if (x > b) b = x;
    return double(a) - double(b);
  }
  std::map<int64_t, std::vector<std::vector<float>>> solo_logits_, batch_logits_;  // per request, per sampled token

  minfer::RunConfig cfg_;
  std::shared_ptr<minfer::gguf::File> file_;
  std::unique_ptr<minfer::BackendSet> backends_;
  std::unique_ptr<minfer::models::Model> solo_model_;
  std::unique_ptr<minfer::Session> solo_;
};

TEST_P(SynthBatch, SequencesJoiningAndFinishingAtDifferentStepsMatchTheirSoloRuns) {
  // f16 weights take the same CPU kernels at any token count: exact there (and 32 sequences
  // of f16 matmuls would be slow on two cores).
  const bool f16 = GetParam().type == "f16";
  for (int64_t n : {1, 7, 32}) {
    if (f16 && n == 32) continue;
    std::vector<minfer::SeqRequest> reqs;
    std::vector<int64_t> arrivals;
    for (int64_t i = 0; i < n; ++i) {
      reqs.push_back({i, prompt(i, 3 + (i * 37) % 150), 4 + (i * 5) % 21, greedy()});
      arrivals.push_back((i * 3) % 11);  // several join while others run
    }
    std::unique_ptr<minfer::models::Model> model;
    auto session = batched(32, 0, model);
    auto b = batch(*model, *session);
    const auto got = run_all(*b, reqs, arrivals);
    const double worst = expect_solo(reqs, got);
    if (f16) EXPECT_EQ(worst, 0.0) << "f16 weights: the batched logits equal the solo ones bit for bit";
    if (n > 1) EXPECT_GT(b->stats().most_seqs, 1) << "sequences shared steps";
  }
}

TEST_P(SynthBatch, APoolTooSmallPreemptsAndEverySequenceStillCompletes) {
  std::vector<minfer::SeqRequest> reqs;
  for (int64_t i = 0; i < 8; ++i) reqs.push_back({i, prompt(i, 40 + i * 9), 40, greedy()});
  std::unique_ptr<minfer::models::Model> model;
  auto session = batched(8, 24, model);  // 24 pages of 16: room for about three of the eight at their end
  auto b = batch(*model, *session);
  const auto got = run_all(*b, reqs, std::vector<int64_t>(reqs.size(), 0));
  EXPECT_GT(b->scheduler().preemptions(), 0) << "the pool was meant to run dry";
  expect_solo(reqs, got);
}

TEST_P(SynthBatch, TwoSequencesSharingAPrefixUseOnePrefixsPages) {
  const std::vector<minfer::SeqRequest> reqs = {{0, prompt(0, 230, 200), 12, greedy()}, {1, prompt(1, 215, 200), 12, greedy()}};
  std::unique_ptr<minfer::models::Model> model;
  auto session = batched(4, 0, model);
  auto b = batch(*model, *session);
  // The second arrives once the first's prompt is in the cache (its full pages registered).
  const int64_t page = model->opts.page_size;
  int32_t most_shared = 0;
  const auto got = run_all(*b, reqs, {0, 6}, [&](int64_t) { most_shared = std::max(most_shared, b->pool().stats().shared); });
  EXPECT_EQ(most_shared, 200 / page) << "while both run, the prefix's full pages are held by both";
  EXPECT_EQ(b->scheduler().reused_positions(), 200 / page * page) << "the second reads the first's full prefix pages";
  expect_solo(reqs, got);
}

INSTANTIATE_TEST_SUITE_P(Types, SynthBatch,
                         ::testing::Values(SynthCase{"q4_0", "backends: {cpu: {threads: 2}}\n", "cpu_q4_0"},
                                           SynthCase{"q8_0", "backends: {cpu: {threads: 2}}\n", "cpu_q8_0"},
                                           SynthCase{"q4_k_m", "backends: {cpu: {threads: 2}}\n", "cpu_q4_k_m"},
                                           SynthCase{"f16", "backends: {cpu: {threads: 2}}\n", "cpu_f16"},
                                           // CUDA against its own solo runs (one-token and many-token kernels differ there too).
                                           SynthCase{"q4_0", "backends: {cuda: {}}\n", "cuda_q4_0"},
                                           SynthCase{"q4_k_m", "backends: {cuda: {}}\n", "cuda_q4_k_m"},
                                           SynthCase{"q8_0", "backends: {cuda: {cuda_graphs: false}}\n", "cuda_nographs_q8_0"}),
                         [](const auto &info) { return info.param.label; });

}  // namespace
