// A model file whose metadata disagrees with itself or its tensors is refused at load, with
// the key, its type or value, and what was expected — never a run that quietly drops layers,
// never an implementation word ("std::get", "stoi") and never a failure mid-run.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "gguf/writer.hpp"
#include "models/model.hpp"
#include "test_util.hpp"
#include "tokenizer/tokenizer.hpp"
#include "config/run_config.hpp"
#include "runtime/generator.hpp"
#include "runtime/placement.hpp"
#include "runtime/session.hpp"
#include "synth/synth.hpp"

#include <algorithm>
#include <cmath>

namespace fs = std::filesystem;
using minfer::gguf::Value;
using minfer::gguf::ValueType;

namespace {

using Metadata = std::vector<std::pair<std::string, Value>>;

// stories260K with its metadata changed by `edit`, written to a file of the test's own.
std::string variant(const std::string &name, const std::function<void(Metadata &)> &edit) {
  const std::string td = minfer::test::testdata_dir();
  const auto src = minfer::gguf::File::open(td + "/models/stories260K.gguf");
  Metadata kv = src->metadata();
  edit(kv);
  minfer::gguf::Writer w(src->alignment());
  for (auto &[k, v] : kv) w.set(k, v);
  for (const auto &t : src->tensors()) w.add_tensor(t.name, t.dtype, std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.n_dims));
  const fs::path dir = fs::temp_directory_path() / "minfer-model-checks";
  fs::create_directories(dir);
  const std::string out = (dir / (name + ".gguf")).string();
  w.begin(out);
  for (const auto &t : src->tensors()) w.write_data(t.data, t.n_bytes);
  w.finish();
  return out;
}

void set(Metadata &kv, const std::string &key, Value v) {
  for (auto &[k, old] : kv)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}

// The message of loading path as minfer-app does: tokenizer, then model.
std::string load_error(const std::string &path) {
  try {
    const auto f = minfer::gguf::File::open(path);
    minfer::tokenizer::Tokenizer::from_gguf(*f);
    minfer::models::BuildOptions bo;
    minfer::models::load_model(f, bo);
  } catch (const minfer::Error &e) {
    return e.what();
  } catch (const std::exception &e) {
    return std::string("not a minfer::Error: ") + e.what();
  }
  return "(loaded)";
}

struct Case {
  const char *name;
  std::function<void(Metadata &)> edit;
  std::vector<std::string> says;  // parts of the message
};

TEST(ModelChecks, InconsistentOrMistypedMetadataIsRefusedAtLoad) {
  if (minfer::test::testdata_dir().empty()) GTEST_SKIP() << "../shared/testdata not found";
  const std::vector<Case> cases = {
      {"block_count_low", [](Metadata &kv) { set(kv, "llama.block_count", Value::u32(4)); },
       {"llama.block_count is 4 but the file holds blocks up to 4", "'blk.4."}},
      {"vocab_small",
       [](Metadata &kv) {
         for (auto &[k, v] : kv) {
           if (k != "tokenizer.ggml.tokens" && k != "tokenizer.ggml.scores" && k != "tokenizer.ggml.token_type") continue;
           std::vector<Value> items(v.arr().items().begin(), v.arr().items().begin() + 500);
           v = Value::array(v.arr().elem, std::move(items));
         }
       },
       {"has 500 tokens but token_embd.weight has 512 rows"}},
      {"scale_u32", [](Metadata &kv) { set(kv, "llama.rope.scale_linear", Value::u32(2)); },
       {"llama.rope.scale_linear' is uint32, expected float32"}},
      {"scale_string", [](Metadata &kv) { set(kv, "llama.rope.scale_linear", Value::str("2")); },
       {"llama.rope.scale_linear' is string, expected float32"}},
      {"scale_zero", [](Metadata &kv) { set(kv, "llama.rope.scale_linear", Value::f32(0)); },
       {"llama.rope.scale_linear is 0", "positive"}},
      {"ctx_zero", [](Metadata &kv) { set(kv, "llama.context_length", Value::u32(0)); },
       {"llama.context_length is 0; it must be a positive count"}},
      {"ctx_negative", [](Metadata &kv) { set(kv, "llama.context_length", Value::i32(-5)); },
       {"llama.context_length is -5; it must be a positive count"}},
      {"heads_string", [](Metadata &kv) { set(kv, "llama.attention.head_count", Value::str("8")); },
       {"llama.attention.head_count", "string"}},
      {"byte_token",
       [](Metadata &kv) {
         for (auto &[k, v] : kv)
           if (k == "tokenizer.ggml.tokens") {
             std::vector<Value> items = v.arr().items();
             items[3] = Value::str("<0xZZ>");
             v = Value::array(ValueType::STRING, std::move(items));
           }
       },
       {"tokenizer.ggml.tokens[3] is '<0xZZ>', of type BYTE", "<0xHH>"}},
  };
  for (const Case &c : cases) {
    const std::string msg = load_error(variant(c.name, c.edit));
    EXPECT_EQ(msg.find("not a minfer::Error"), std::string::npos) << c.name << ": " << msg;
    for (const std::string &part : c.says) EXPECT_NE(msg.find(part), std::string::npos) << c.name << ": " << msg;
  }
  // The unchanged file still loads: the checks refuse only what is wrong.
  EXPECT_EQ(load_error(variant("unchanged", [](Metadata &) {})), "(loaded)");
}

// Every architecture's tiny synthetic preset loads and runs on the CPU (what `minfer-gguf
// synth` writes, minfer reads: the key and tensor names llama.cpp's loader uses).
TEST(SynthArchitectures, TinyPresetsLoadAndRun) {
  for (const char *arch : {"qwen2", "llama", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3"}) {
    minfer::synth::Options o;
    o.arch = arch;
    o.preset = "tiny";
    o.type = "q8_0";
    o.seed = 3;
    o.out = (fs::temp_directory_path() / (std::string("minfer-synth-") + arch + ".gguf")).string();
    minfer::synth::synthesize(o);
    const auto f = minfer::gguf::File::open(o.out);
    minfer::models::BuildOptions bo;
    bo.n_ctx = 64;
    bo.max_batch = 16;
    const auto model = minfer::models::load_model(f, bo);
    EXPECT_EQ(model->hp.arch, arch);
    const minfer::RunConfig cfg = minfer::parse_run_config("backends: {cpu: {threads: 2}}\n", "t.yaml");
    minfer::BackendSet backends = minfer::open_backends(cfg);
    minfer::Session session(model->graph, cfg, backends);
    minfer::Generator gen(*model, session);
    std::vector<float> logits = gen.feed({1, 2, 3, 4, 5, 6, 7, 8});
    logits = gen.feed({9});
    ASSERT_EQ(int64_t(logits.size()), model->hp.n_vocab) << arch;
    EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); })) << arch;
  }
}

// What minfer synthesizes is what llama.cpp reads: for each architecture, the tiny preset
// holds every "<arch>.*" key and the same tensor names (block 0 and the rest) as the file of
// ../shared/testdata/arch written with llama.cpp's own gguf-py names, which loads in llama.cpp.
TEST(SynthArchitectures, KeyAndTensorNamesMatchLlamaCppWrittenFiles) {
  const std::string td = minfer::test::testdata_dir();
  if (td.empty() || !fs::is_directory(fs::path(td) / "arch")) GTEST_SKIP() << "../shared/testdata/arch not found";
  // Keys a file has only for its own settings (the tiny presets choose others).
  const std::set<std::string> optional = {"rope.scaling.type", "rope.scaling.factor", "rope.dimension_count"};
  for (const char *arch : {"qwen2", "llama", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3"}) {
    const auto ref = minfer::gguf::File::open((fs::path(td) / "arch" / (std::string(arch) + "-f32.gguf")).string());
    minfer::synth::Options o;
    o.arch = arch;
    o.preset = "tiny";
    o.type = "f16";
    o.layers = 1;
    o.out = (fs::temp_directory_path() / (std::string("minfer-synth-names-") + arch + ".gguf")).string();
    minfer::synth::synthesize(o);
    const auto ours = minfer::gguf::File::open(o.out);
    const std::string prefix = std::string(arch) + ".";
    for (const auto &[key, v] : ref->metadata())
      if (key.rfind(prefix, 0) == 0 && !optional.count(key.substr(prefix.size())))
        EXPECT_NE(ours->find(key), nullptr) << arch << ": llama.cpp's file has " << key << ", the synthetic one not";
    // Tensor names outside the blocks, and those of block 0, as sets.
    auto names = [](const minfer::gguf::File &f) {
      std::set<std::string> out;
      for (const auto &t : f.tensors())
        if (t.name.rfind("blk.", 0) != 0 || t.name.rfind("blk.0.", 0) == 0) out.insert(t.name);
      return out;
    };
    // output.weight: present or not by each file's choice of tied embeddings.
    std::set<std::string> want = names(*ref), got = names(*ours);
    got.erase("output.weight");
    want.erase("output.weight");
    EXPECT_EQ(got, want) << arch;
    fs::remove(o.out);
  }
}

// Phi-3 LongRoPE (the 128k files, Phi-4-mini): the short factors up to the original context,
// the long ones above it (llama.cpp's rule), with partial rotary and the attention factor.
TEST(SynthArchitectures, LongRopePicksFactorsByContext) {
  minfer::synth::Options o;
  o.arch = "phi3";
  o.preset = "tiny-longrope";
  o.type = "q8_0";
  o.out = (fs::temp_directory_path() / "minfer-synth-longrope.gguf").string();
  minfer::synth::synthesize(o);
  const auto f = minfer::gguf::File::open(o.out);
  std::vector<std::vector<float>> runs;
  for (const int64_t n_ctx : {128, 256}) {  // the preset's original context is 128
    minfer::models::BuildOptions bo;
    bo.n_ctx = n_ctx;
    bo.max_batch = 16;
    const auto model = minfer::models::load_model(f, bo);
    EXPECT_TRUE(model->hp.longrope);
    EXPECT_EQ(model->hp.rope_dims, 48);
    EXPECT_GT(model->hp.rope_attn_factor, 1.0f);
    const bool want_long = n_ctx > 128;
    EXPECT_GE(model->graph.find_tensor(want_long ? "rope_factors_long.weight" : "rope_factors_short.weight"), 0) << n_ctx;
    EXPECT_LT(model->graph.find_tensor(want_long ? "rope_factors_short.weight" : "rope_factors_long.weight"), 0) << n_ctx;
    const minfer::RunConfig cfg = minfer::parse_run_config("backends: {cpu: {threads: 2}}\n", "t.yaml");
    minfer::BackendSet backends = minfer::open_backends(cfg);
    minfer::Session session(model->graph, cfg, backends);
    minfer::Generator gen(*model, session);
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 40; ++i) prompt.push_back(100 + 7 * i);
    runs.push_back(gen.feed(prompt));
    EXPECT_TRUE(std::all_of(runs.back().begin(), runs.back().end(), [](float x) { return std::isfinite(x); }));
  }
  // The two factor sets rotate differently: the logits must differ.
  double diff = 0;
  for (size_t i = 0; i < runs[0].size(); ++i) diff = std::max(diff, std::fabs(double(runs[0][i]) - runs[1][i]));
  EXPECT_GT(diff, 1e-3);
  fs::remove(o.out);
}

}  // namespace
