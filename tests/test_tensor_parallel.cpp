// Dividing a model among several backends of one plugin (placement `split: layer` and
// `split: tensor`): the same tokens as one backend. Two CPU backends stand in for two GPUs
// (their all-reduce sums on the host, in rank order); the CUDA cases skip without the GPUs
// they need.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/run_config.hpp"
#include "cuda_available.hpp"
#include "models/model.hpp"
#include "runtime/batch_session.hpp"
#include "runtime/generator.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"
#include "synth/synth.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

// Logits of a prompt (every row) and of greedy decode steps after it, with the tokens chosen.
struct Outcome {
  std::vector<std::vector<float>> rows;  // prompt rows, then one per decode step
  std::vector<int32_t> tokens;           // greedy tokens
  std::string explain;
};

Outcome run(const std::shared_ptr<minfer::gguf::File> &file, const std::string &yaml, const std::vector<int32_t> &prompt, int n_gen) {
  const minfer::RunConfig cfg = minfer::parse_run_config(yaml, "tp.yaml");
  minfer::models::BuildOptions bo;
  bo.n_ctx = 256;
  bo.max_batch = 64;
  bo.all_logits = true;
  bo.tensor_parallel = cfg.tensor_ranks();
  const auto model = minfer::models::load_model(file, bo);
  minfer::BackendSet backends = minfer::open_backends(cfg);
  minfer::Session session(model->graph, cfg, backends);
  minfer::Generator gen(*model, session);
  const int64_t V = model->hp.n_vocab;
  Outcome r;
  r.explain = session.explain();
  std::vector<float> l = gen.feed(prompt);
  for (size_t t = 0; t < prompt.size(); ++t) r.rows.emplace_back(l.begin() + int64_t(t) * V, l.begin() + int64_t(t + 1) * V);
  for (int i = 0; i < n_gen; ++i) {
    const std::vector<float> &last = r.rows.back();
    r.tokens.push_back(int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
    l = gen.feed({r.tokens.back()});
    r.rows.push_back(l);
  }
  return r;
}

// b's logits within max_rel of a's (relative to each row's RMS), and b's greedy tokens a's: as
// TESTING.md's clear-position rule says, a token may differ only where a's top-2 margin is
// within twice the two runs' largest difference in that row; the comparison stops there (the
// runs then continue from different tokens).
void expect_same_run(const Outcome &a, const Outcome &b, double max_rel, const std::string &what) {
  ASSERT_EQ(a.rows.size(), b.rows.size()) << what;
  const size_t prompt = a.rows.size() - a.tokens.size();
  double worst = 0;
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const std::vector<float> &x = a.rows[i], &y = b.rows[i];
    double diff = 0, sq = 0;
    for (size_t v = 0; v < x.size(); ++v) diff = std::max(diff, std::fabs(double(x[v]) - y[v])), sq += double(x[v]) * x[v];
    worst = std::max(worst, diff / std::sqrt(sq / double(x.size())));
    if (i + 1 < prompt || i + 1 - prompt >= a.tokens.size()) continue;
    const size_t g = i + 1 - prompt;  // the token chosen from row i
    if (a.tokens[g] == b.tokens[g]) continue;
    std::vector<float> sorted(x);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    EXPECT_LE(double(sorted[0]) - sorted[1], 2 * diff) << what << ": token " << g << " differs (" << a.tokens[g] << " vs " << b.tokens[g]
                                                       << ") where the margin is clear";
    break;
  }
  std::printf("%s: max |a - b| / rms(logits) = %.3g over %zu rows\n", what.c_str(), worst, a.rows.size());
  EXPECT_LE(worst, max_rel) << what;
}

std::shared_ptr<minfer::gguf::File> stories() {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty() || !fs::exists(td + "/models/stories260K.gguf")) return nullptr;
  return minfer::gguf::File::open(td + "/models/stories260K.gguf");
}

std::shared_ptr<minfer::gguf::File> synthetic(const std::string &arch, const std::string &type) {
  const fs::path path = fs::temp_directory_path() / ("minfer-tp-" + arch + "-tiny-" + type + ".gguf");
  if (!fs::exists(path)) {
    minfer::synth::Options o;
    o.arch = arch;
    o.preset = "tiny";
    o.type = type;
    o.seed = 3;
    o.out = path.string();
    minfer::synth::synthesize(o);
  }
  return minfer::gguf::File::open(path.string());
}

// Two ranks change only the float order of the attention output's and FFN down's sums: 2e-6
// of the logits' RMS with f32 weights (Phi-3 tiny). With quantized weights the next matmul
// rounds its activations to 8 bits, and a value the reordering moves across a rounding step
// shifts the logits by up to a few percent (Qwen2 tiny Q8_0 2e-6, Q4_0 8e-3; Phi-3 tiny Q8_0
// 4e-3, Q4_0 3e-2 seen). A wrong slice or a missing sum is off by ~100%.
constexpr double kQuantizedBound = 0.08;

const std::vector<int32_t> kPrompt{1, 403, 261, 378, 259, 410, 286, 365, 263, 432, 280, 317};
const std::string kTwoCpus = "backends: {cpu0: {plugin: cpu, threads: 1}, cpu1: {plugin: cpu, threads: 1}}\n";

// The explain line of node `name` with its runs of spaces as one: "blk.0.attn_q@1 matmul cpu1 …".
std::string placed(const std::string &explain, const std::string &name) {
  const size_t at = explain.find("\n  " + name + " ");
  if (at == std::string::npos) return "";
  const std::string line = explain.substr(at + 3, explain.find('\n', at + 1) - at - 3);
  std::string out;
  for (char c : line)
    if (c != ' ' || (!out.empty() && out.back() != ' ')) out += c;
  return out;
}

std::string error_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

}  // namespace

// One rank is the plain graph with identity all-reduces: the same bits. A layer split runs the
// same kernels on two backends: the same bits too, with the activations copied between them.
TEST(TensorParallel, OneRankAndLayerSplitEqualOneBackend) {
  const auto file = stories();
  if (!file) GTEST_SKIP() << "../shared/testdata/models/stories260K.gguf is absent";
  const Outcome one = run(file, "backends: {cpu: {threads: 1}}\n", kPrompt, 24);
  const Outcome rank = run(file, "backends: {cpu0: {plugin: cpu, threads: 1}}\nplacement: {split: tensor, devices: [cpu0]}\n", kPrompt, 24);
  EXPECT_EQ(rank.tokens, one.tokens);
  EXPECT_EQ(rank.rows, one.rows);
  EXPECT_NE(rank.explain.find("all-reduces (split: tensor): 10"), std::string::npos) << rank.explain;  // 2 per layer
  const Outcome layers = run(file, kTwoCpus + "placement: {split: layer, devices: [cpu0, cpu1]}\n", kPrompt, 24);
  EXPECT_EQ(layers.tokens, one.tokens);
  EXPECT_EQ(layers.rows, one.rows);
  // 5 layers over 2 (layer l on device l * 2 / 5): blocks 0-2 and the embeddings on cpu0,
  // 3-4 and the output on cpu1; one copy of x between.
  EXPECT_NE(layers.explain.find("split: layer over cpu0, cpu1"), std::string::npos) << layers.explain;
  EXPECT_EQ(placed(layers.explain, "token_embd").substr(0, 24), "token_embd get_rows cpu0");
  EXPECT_EQ(placed(layers.explain, "blk.2.ffn_residual").substr(0, 27), "blk.2.ffn_residual add cpu0");
  EXPECT_EQ(placed(layers.explain, "blk.3.attn_norm").substr(0, 29), "blk.3.attn_norm rms_norm cpu1");
  EXPECT_EQ(placed(layers.explain, "logits").substr(0, 18), "logits matmul cpu1");
  EXPECT_NE(layers.explain.find("copies inserted: 1\n  copy blk.2.ffn_residual: cpu0 -> cpu1 (16.0 KiB, device to device)"), std::string::npos)
      << layers.explain;
}

// Two ranks: each layer's heads and FFN rows halved, the attention output and FFN down sums
// completed by all-reduces. Only the summation order of those two matmuls changes.
TEST(TensorParallel, TwoRanksMatchOneBackend) {
  const auto file = stories();
  if (!file) GTEST_SKIP() << "../shared/testdata/models/stories260K.gguf is absent";
  const Outcome one = run(file, "backends: {cpu: {threads: 1}}\n", kPrompt, 24);
  const Outcome two = run(file, kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1]}\n", kPrompt, 24);
  // f32 weights: 3e-4 of the logits' RMS seen after 5 layers of reordered sums.
  expect_same_run(one, two, 1e-3, "stories260K, 2 ranks");
  // Rank 1's half of the query heads: 4 of 8 heads of 8 values.
  EXPECT_EQ(placed(two.explain, "blk.0.attn_q@1"), "blk.0.attn_q@1 matmul cpu1 blk.0.attn_q@1 f32[32, 64]");
  EXPECT_EQ(placed(two.explain, "logits").substr(0, 18), "logits matmul cpu0");
  EXPECT_NE(two.explain.find("all-reduce blk.4.ffn_down_sum@0 over cpu0, cpu1"), std::string::npos) << two.explain;
  EXPECT_NE(two.explain.find("copies inserted: 0"), std::string::npos) << two.explain;  // ranks share nothing but sums
  // Each rank holds half of every layer's KV cache (2 of 4 KV heads): 80 KiB of the 160.
  const Outcome one_rank = run(file, "backends: {cpu0: {plugin: cpu, threads: 1}}\nplacement: {split: tensor, devices: [cpu0]}\n", kPrompt, 1);
  EXPECT_NE(one_rank.explain.find("cpu0: weights 1.1 MiB, state 160.0 KiB"), std::string::npos) << one_rank.explain;
  EXPECT_NE(two.explain.find("cpu1: weights 573.0 KiB, state 80.0 KiB"), std::string::npos) << two.explain;
}

// Qwen2's biases are divided with their rows; Q8_0 and Q4_0 rows cut on their 32-value blocks.
// A K-quant's 256-value blocks do not divide the tiny model's 128-value halves: a clear error.
TEST(TensorParallel, SyntheticQwen2MatchesOneBackend) {
  for (const char *type : {"q8_0", "q4_0"}) {
    const auto file = synthetic("qwen2", type);
    const Outcome one = run(file, "backends: {cpu: {threads: 1}}\n", kPrompt, 16);
    const Outcome two = run(file, kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1]}\n", kPrompt, 16);
    expect_same_run(one, two, kQuantizedBound, std::string("qwen2 tiny ") + type + ", 2 ranks");
  }
  const auto kq = synthetic("qwen2", "q4_k");
  const std::string why = error_of([&] { run(kq, kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1]}\n", kPrompt, 1); });
  EXPECT_NE(why.find("split: tensor cuts the rows of 'blk.0.attn_output.weight' (256 q4_k values) at 0 and 128, not on its blocks of 256"),
            std::string::npos)
      << why;
}

// The other architectures' tiny presets: Qwen3's per-head q/k norms, Phi-3's fused Q/K/V and
// gate+up weights (each rank's rows of each part), Gemma 2's extra norms and soft-caps (after
// the sums). Gemma 3's tiny preset has one KV head: two ranks cannot share it.
TEST(TensorParallel, OtherArchitecturesMatchOneBackend) {
  for (const char *arch : {"qwen3", "phi3", "gemma2"}) {
    const auto file = synthetic(arch, "q8_0");
    const Outcome one = run(file, "backends: {cpu: {threads: 1}}\n", kPrompt, 12);
    const Outcome two = run(file, kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1]}\n", kPrompt, 12);
    expect_same_run(one, two, kQuantizedBound, std::string(arch) + " tiny q8_0, 2 ranks");
  }
  const std::string why = error_of([&] { run(synthetic("gemma3", "q8_0"), kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1]}\n", kPrompt, 1); });
  EXPECT_NE(why.find("needs the attention heads (4 query, 1 key/value) to divide among them"), std::string::npos) << why;
}

// Several sequences at once (the batched session over the paged cache) under split: tensor:
// every sequence's greedy tokens those of one backend.
TEST(TensorParallel, SeveralSequencesMatchOneBackend) {
  const auto file = stories();
  if (!file) GTEST_SKIP() << "../shared/testdata/models/stories260K.gguf is absent";
  auto tokens_of = [&](const std::string &yaml) {
    const minfer::RunConfig cfg = minfer::parse_run_config(yaml, "tp.yaml");
    minfer::models::BuildOptions bo;
    bo.n_ctx = 128, bo.max_batch = 64, bo.max_seqs = 4, bo.kv_pages = 4 * 8;
    bo.tensor_parallel = cfg.tensor_ranks();
    const auto model = minfer::models::load_model(file, bo);
    minfer::BackendSet backends = minfer::open_backends(cfg);
    minfer::Session session(model->graph, cfg, backends);
    minfer::BatchSession batch(*model, session, [](int32_t) { return false; });
    minfer::sampling::Config greedy;
    greedy.temperature = 0;
    for (int64_t i = 0; i < 4; ++i) {
      std::vector<int32_t> prompt(kPrompt.begin(), kPrompt.begin() + 4 + 2 * i);
      batch.submit({i, prompt, 20, greedy});
    }
    std::map<int64_t, std::vector<int32_t>> out;
    for (int step = 0; step < 200 && !batch.idle(); ++step)
      for (const auto &t : batch.step()) out[t.id].push_back(t.token);
    EXPECT_TRUE(batch.idle());
    return out;
  };
  const auto one = tokens_of("backends: {cpu: {threads: 1}}\n");
  const auto two = tokens_of(kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1]}\n");
  ASSERT_EQ(one.size(), 4u);
  // stories260K's f32 logits move by ~1e-6 of their RMS between the two (TwoRanksMatchOneBackend):
  // its trained margins are far above that over 20 tokens.
  EXPECT_EQ(two, one);
}

// What cannot be divided fails the build, naming what and why.
TEST(TensorParallel, ErrorsNameWhatToDo) {
  const auto file = stories();
  if (!file) GTEST_SKIP() << "../shared/testdata/models/stories260K.gguf is absent";
  const std::string three = "backends: {a: {plugin: cpu}, b: {plugin: cpu}, c: {plugin: cpu}}\nplacement: {split: tensor, devices: [a, b, c]}\n";
  std::string why = error_of([&] { run(file, three, kPrompt, 1); });
  EXPECT_NE(why.find("split: tensor over 3 devices needs the attention heads (8 query, 4 key/value) to divide among them"), std::string::npos)
      << why;
  // Mixture-of-experts layers are not divided (yet): the build says what to use instead.
  why = error_of([&] { run(synthetic("qwen3moe", "q8_0"), kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1]}\n", kPrompt, 1); });
  EXPECT_NE(why.find("needs dense layers (mixture-of-experts layers are not divided among devices yet); use split: layer"), std::string::npos)
      << why;
  // A graph built for other ranks than the config's devices.
  why = error_of([&] {
    const minfer::RunConfig cfg = minfer::parse_run_config(kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1]}\n", "tp.yaml");
    minfer::models::BuildOptions bo;
    bo.n_ctx = 64;
    const auto model = minfer::models::load_model(file, bo);
    minfer::BackendSet backends = minfer::open_backends(cfg);
    minfer::Session session(model->graph, cfg, backends);
  });
  EXPECT_NE(why.find("its graph was built for 0 rank(s)"), std::string::npos) << why;
}

TEST(TensorParallel, ConfigErrors) {
  auto config_error = [](const std::string &yaml) { return error_of([&] { minfer::parse_run_config(yaml, "tp.yaml"); }); };
  EXPECT_NE(config_error(kTwoCpus + "placement: {split: tensor}\n").find("'split' needs 'devices: [NAME, ...]'"), std::string::npos);
  EXPECT_NE(config_error(kTwoCpus + "placement: {split: rows, devices: [cpu0]}\n").find("unknown split 'rows'"), std::string::npos);
  EXPECT_NE(config_error(kTwoCpus + "placement: {split: tensor, devices: [cpu0, gpu9]}\n")
                .find("'devices' names backend 'gpu9', which is not listed under 'backends'"),
            std::string::npos);
  EXPECT_NE(config_error(kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu0]}\n").find("listed twice"), std::string::npos);
  EXPECT_NE(config_error(kTwoCpus + "placement: {split: tensor, devices: [cpu0, cpu1], experts: cpu0}\n")
                .find("'experts' does not go with 'split: tensor'"),
            std::string::npos);
  EXPECT_NE(config_error(kTwoCpus + "placement: {default: cpu0, devices: [cpu0]}\n").find("'devices' goes with 'split"), std::string::npos);
  const minfer::RunConfig ok = minfer::parse_run_config(kTwoCpus + "placement: {split: layer, devices: [cpu1, cpu0]}\n", "tp.yaml");
  EXPECT_EQ(ok.default_backend, "cpu1");
  EXPECT_EQ(ok.tensor_ranks(), 0);
}

// The same on GPUs: one rank through NCCL on one GPU, two ranks and a layer split on two.
TEST(TensorParallelCuda, OneRankOnOneGpu) {
  if (const std::string why = minfer::test::cuda_devices_unavailable(1); !why.empty()) GTEST_SKIP() << why;
  const auto file = synthetic("qwen2", "q4_0");
  const Outcome one = run(file, "backends: {cuda: {}}\n", kPrompt, 16);
  const Outcome rank = run(file, "backends: {gpu0: {plugin: cuda, device: 0}}\nplacement: {split: tensor, devices: [gpu0]}\n", kPrompt, 16);
  expect_same_run(one, rank, 1e-6, "qwen2 tiny q4_0, 1 rank on cuda:0");
}

TEST(TensorParallelCuda, TwoGpus) {
  if (const std::string why = minfer::test::cuda_devices_unavailable(2); !why.empty()) GTEST_SKIP() << why;
  const std::string gpus = "backends: {gpu0: {plugin: cuda, device: 0}, gpu1: {plugin: cuda, device: 1}}\n";
  for (const char *type : {"q4_0", "q8_0"}) {
    const auto file = synthetic("qwen2", type);
    const Outcome one = run(file, "backends: {cuda: {}}\n", kPrompt, 16);
    const Outcome layers = run(file, gpus + "placement: {split: layer, devices: [gpu0, gpu1]}\n", kPrompt, 16);
    expect_same_run(one, layers, 1e-6, std::string("qwen2 tiny ") + type + ", layers over 2 GPUs");
    EXPECT_NE(layers.explain.find("device to device"), std::string::npos) << layers.explain;
    const Outcome two = run(file, gpus + "placement: {split: tensor, devices: [gpu0, gpu1]}\n", kPrompt, 16);
    expect_same_run(one, two, 0.05, std::string("qwen2 tiny ") + type + ", 2 ranks over 2 GPUs");
  }
}

// A device the machine lacks fails the build with the backend's name and the device count.
TEST(TensorParallelCuda, MissingDeviceFailsTheBuild) {
  if (minfer::test::cuda_unavailable().rfind("the CUDA plugin is not built", 0) == 0) GTEST_SKIP() << minfer::test::cuda_unavailable();
  const std::string why = error_of([] {
    minfer::open_backends(minfer::parse_run_config(
        "backends: {gpu7: {plugin: cuda, device: 7}, gpu0: {plugin: cuda, device: 0}}\nplacement: {split: tensor, devices: [gpu0, gpu7]}\n",
        "tp.yaml"));
  });
  EXPECT_NE(why.find("backend 'gpu7' asks for device 7, but the plugin sees"), std::string::npos) << why;
}
