// Text generation on the CPU against llama.cpp's reference outputs for stories260K: the
// prompt's tokens, 64 greedy tokens, and the logits after the prompt, for both KV types.
#include <gtest/gtest.h>

#include <ostream>

#include <cmath>
#include <fstream>

#include "common/error.hpp"
#include "config/run_config.hpp"
#include "runtime/plugin.hpp"
#include <nlohmann/json.hpp>
#include "models/model.hpp"
#include "runtime/generator.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"
#include "sampling/sampler.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

struct Reference {
  std::string prompt, greedy_text;
  std::vector<int32_t> prompt_tokens, greedy_tokens;
  std::vector<float> logits;
  double min_margin;
};

std::vector<Reference> read_reference(const std::string &path) {
  std::ifstream in(path);
  std::vector<Reference> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back({j["prompt"], j["greedy_text"], j["prompt_tokens"], j["greedy_tokens"], j["first_step_logits"], j["min_top2_margin"]});
  }
  return out;
}

struct Case {
  const char *file;
  int32_t kv_type;
  double logit_tol;
  const char *backends;  // the run config's backends and placement
  const char *label;
};


// gtest prints a test's parameter in listings: the label and KV type, not the struct's bytes.
void PrintTo(const Case &c, std::ostream *os) { *os << c.label << ", " << minfer_dtype_name(c.kv_type) << " KV"; }

class Stories : public ::testing::TestWithParam<Case> {};

TEST_P(Stories, GreedyTokensAndFirstLogitsMatchLlamaCpp) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  const Case c = GetParam();
  const auto refs = read_reference(td + "/reference/" + c.file);
  ASSERT_FALSE(refs.empty());

  auto file = minfer::gguf::File::open(td + "/models/stories260K.gguf");
  const auto tok = minfer::tokenizer::Tokenizer::from_gguf(*file);
  minfer::models::BuildOptions bo;
  bo.kv_type = c.kv_type;
  bo.n_ctx = 256;
  bo.max_batch = 64;
  const auto model = minfer::models::load_model(file, bo);
  const minfer::RunConfig cfg = minfer::parse_run_config(c.backends, "test.yaml");
  std::string why;
  if (!minfer::test::backends_usable(cfg, why)) GTEST_SKIP() << c.label << ": " << why;
  minfer::BackendSet backends = minfer::open_backends(cfg);
  minfer::Session session(model->graph, cfg, backends);
  // The logits land in memory of the backend that computes them where it has some (CUDA:
  // page-locked, ABI 1.10 host_alloc); the CPU's are ordinary.
  const bool logits_on_cuda = backends.count("cuda") && session.placement().home[size_t(model->graph.find_tensor(minfer::models::Model::kLogits))] == "cuda";
  EXPECT_EQ(session.output_host_memory(minfer::models::Model::kLogits, 64).backend_owned(), logits_on_cuda) << c.label;

  for (const Reference &r : refs) {
    const auto ids = tok->encode(r.prompt, true, false);
    EXPECT_EQ(ids, r.prompt_tokens) << r.prompt;
    minfer::Generator gen(*model, session);
    std::vector<float> logits = gen.feed(r.prompt_tokens);
    ASSERT_EQ(logits.size(), r.logits.size());
    double max_err = 0;
    for (size_t i = 0; i < logits.size(); ++i) max_err = std::max(max_err, std::fabs(double(logits[i]) - r.logits[i]));
    EXPECT_LE(max_err, c.logit_tol) << "first-step logits, prompt '" << r.prompt << "'";
    std::printf("%s %s kv %s: prompt '%.30s': max |logit - llama.cpp| = %.2e\n", c.label, c.file, minfer_dtype_name(c.kv_type),
                r.prompt.c_str(), max_err);

    minfer::sampling::Config greedy;
    greedy.temperature = 0;
    minfer::sampling::Sampler s(greedy);
    std::vector<int32_t> history = r.prompt_tokens, out;
    for (size_t i = 0; i < r.greedy_tokens.size(); ++i) {
      const int32_t next = s.sample(logits.data(), int64_t(logits.size()), history);
      out.push_back(next);
      history.push_back(next);
      logits = gen.feed({next});
    }
    EXPECT_EQ(out, r.greedy_tokens) << "greedy continuation of '" << r.prompt << "'";
    // The text a user sees: the continuation after the prompt keeps its first space.
    minfer::tokenizer::StreamDecoder dec(*tok, /*at_sequence_start=*/false);
    std::string text;
    for (int32_t id : out) text += dec.push(id);
    EXPECT_EQ(text + dec.flush(), r.greedy_text) << "greedy text of '" << r.prompt << "'";
  }
}

const char *kCpu = "backends: {cpu: {threads: 2}}\n";  // weights copied (the default)
const char *kCpuMapped = "backends: {cpu: {threads: 2, weights: mapped}}\n";
const char *kCuda = "backends: {cuda: {}}\n";  // decode steps replay a captured CUDA Graph
const char *kCudaNoGraphs = "backends: {cuda: {cuda_graphs: false}}\n";
// The first two layers and the embedding on the GPU, the rest on the CPU: copies both ways.
const char *kMixed = "backends: {cpu: {threads: 2}, cuda: {}}\nplacement:\n  default: cpu\n  rules:\n"
                     "    - {match: 'token_embd', backend: cuda}\n    - {match: 'blk.[01].*', backend: cuda}\n";

// Two backends of one plugin (issue 22's layer split, on the CPU): the embedding and layers
// 0-1 on cpu0, layers 2-4 and the output on cpu1, the activations copied between them.
const char *kTwoCpus = "backends: {cpu0: {plugin: cpu, threads: 1}, cpu1: {plugin: cpu, threads: 1}}\nplacement:\n  default: cpu0\n"
                       "  rules:\n    - {match: 'blk.[2-9].*', backend: cpu1}\n    - {match: 'output*', backend: cpu1}\n";

INSTANTIATE_TEST_SUITE_P(
    KvTypes, Stories,
    ::testing::Values(Case{"stories260K.greedy.jsonl", MINFER_DTYPE_F16, 2e-2, kCpu, "cpu"},
                      Case{"stories260K.greedy-f32kv.jsonl", MINFER_DTYPE_F32, 1e-4, kCpu, "cpu"},
                      Case{"stories260K.greedy-f32kv.jsonl", MINFER_DTYPE_F32, 1e-4, kCpuMapped, "cpu_mapped"},
                      Case{"stories260K.greedy.jsonl", MINFER_DTYPE_F16, 2e-2, kTwoCpus, "two_cpus"},
                      Case{"stories260K.greedy.jsonl", MINFER_DTYPE_F16, 2e-2, kCuda, "cuda"},
                      Case{"stories260K.greedy-f32kv.jsonl", MINFER_DTYPE_F32, 1e-4, kCuda, "cuda"},
                      Case{"stories260K.greedy.jsonl", MINFER_DTYPE_F16, 2e-2, kCudaNoGraphs, "cuda_nographs"},
                      Case{"stories260K.greedy.jsonl", MINFER_DTYPE_F16, 2e-2, kMixed, "mixed"},
                      Case{"stories260K.greedy-f32kv.jsonl", MINFER_DTYPE_F32, 1e-4, kMixed, "mixed"}),
    [](const auto &info) { return std::string(info.param.label) + "_" + minfer_dtype_name(info.param.kv_type) + "_kv"; });

// f(cfg, backends) on the CPU, then on CUDA where it is usable (a line says why not).
template <class F>
void for_each_usable_backend(F &&f) {
  for (const char *backends_yaml : {kCpu, kCuda}) {
    SCOPED_TRACE(backends_yaml);
    const minfer::RunConfig cfg = minfer::parse_run_config(backends_yaml, "test.yaml");
    std::string why;
    if (!minfer::test::backends_usable(cfg, why)) {
      std::printf("skipped %s: %s\n", backends_yaml, why.c_str());
      continue;
    }
    minfer::BackendSet backends = minfer::open_backends(cfg);
    f(cfg, backends);
  }
}

// A prompt longer than a step (all_logits: every token's row, over three steps) gives the rows
// that feeding its tokens one at a time gives, and the next feed its one row; on each backend.
TEST(GeneratorLogits, EveryRowOfAPromptOverSeveralStepsMatchesOneTokenFeeds) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  auto file = minfer::gguf::File::open(td + "/models/stories260K.gguf");
  const std::vector<int32_t> prompt = {1, 403, 261, 142, 117, 400, 291, 422, 272, 306};
  for_each_usable_backend([&](const minfer::RunConfig &cfg, minfer::BackendSet &backends) {
    const auto run = [&](bool all_logits, int64_t max_batch, bool one_by_one) {
      minfer::models::BuildOptions bo;
      bo.kv_type = MINFER_DTYPE_F32;
      bo.n_ctx = 64;
      bo.max_batch = max_batch;
      bo.all_logits = all_logits;
      const auto model = minfer::models::load_model(file, bo);
      minfer::Session session(model->graph, cfg, backends);
      minfer::Generator gen(*model, session);
      std::vector<float> rows;
      if (one_by_one) {
        for (int32_t t : prompt) {
          const minfer::Logits l = gen.feed({t});
          EXPECT_EQ(l.size(), size_t(model->hp.n_vocab));
          rows.insert(rows.end(), l.begin(), l.end());
        }
      } else {
        rows = gen.feed(prompt);
        EXPECT_EQ(gen.feed({prompt[0]}).size(), size_t(model->hp.n_vocab)) << "a decode step after the prompt: one row";
      }
      return rows;
    };
    const std::vector<float> batched = run(true, 4, false), single = run(false, 4, true);
    ASSERT_EQ(batched.size(), single.size());
    double max_err = 0;
    for (size_t i = 0; i < batched.size(); ++i) max_err = std::max(max_err, std::fabs(double(batched[i]) - single[i]));
    EXPECT_LE(max_err, 1e-3) << "the prompt's rows fed four tokens a step against one token a step";
  });
}

// The generator asks for each step's logits before the step runs (read with the step's own
// wait where the backend can): they are the bytes read_output gives after it, and a request
// with too little room fails that run with the output's name, and only that run.
TEST(GeneratorLogits, ReadWithTheStepAreTheOutputsBytesAndItsRoomIsChecked) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty()) GTEST_SKIP() << "../shared/testdata not found";
  auto file = minfer::gguf::File::open(td + "/models/stories260K.gguf");
  for_each_usable_backend([&](const minfer::RunConfig &cfg, minfer::BackendSet &backends) {
    minfer::models::BuildOptions bo;
    bo.n_ctx = 64;
    bo.max_batch = 8;
    const auto model = minfer::models::load_model(file, bo);
    minfer::Session session(model->graph, cfg, backends);
    minfer::Generator gen(*model, session);
    for (int32_t t : {1, 403, 261}) {
      const std::vector<float> got = gen.feed({t});
      std::vector<float> after(session.output_bytes(minfer::models::Model::kLogits) / 4);
      session.read_output(minfer::models::Model::kLogits, after.data(), after.size() * 4);
      EXPECT_EQ(got, after) << "token " << t;
    }
    float small[1];
    session.read_output_after_next_run(minfer::models::Model::kLogits, small, sizeof small);
    try {
      gen.feed({5});
      ADD_FAILURE() << "a 4-byte room for a row of logits was taken";
    } catch (const minfer::Error &e) {
      EXPECT_NE(std::string(e.what()).find("'logits' holds"), std::string::npos) << e.what();
    }
    EXPECT_EQ(gen.feed({5}).size(), size_t(model->hp.n_vocab)) << "the next run reads as before";
  });
}

}  // namespace
