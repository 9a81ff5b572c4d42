// GGUF reading, writing and validation; the quantizers' round-trip errors; synthesis.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/error.hpp"
#include "gguf/gguf.hpp"
#include "gguf/writer.hpp"
#include "gguf_corpus.hpp"
#include "test_util.hpp"
#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "quant/quantize.hpp"
#include "quant/reference.hpp"
#include "quant/type_policy.hpp"
#include "synth/synth.hpp"

namespace fs = std::filesystem;

namespace {

std::string testdata() { return minfer::test::testdata_dir(); }

#define REQUIRE_TESTDATA(dir) \
  const std::string dir = testdata(); \
  if (dir.empty()) GTEST_SKIP() << "../shared/testdata not found (set MINFER_TESTDATA)"

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("minfer-test-" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

TEST(GgufRead, Stories260KFacts) {
  REQUIRE_TESTDATA(td);
  const auto f = minfer::gguf::File::open(td + "/models/stories260K.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->architecture(), "llama");
  EXPECT_EQ(f->get<uint32_t>("llama.block_count"), 5u);
  EXPECT_EQ(f->get<uint32_t>("llama.embedding_length"), 64u);
  EXPECT_EQ(f->get<uint32_t>("llama.attention.head_count"), 8u);
  EXPECT_EQ(f->get<uint32_t>("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(f->get<uint32_t>("llama.feed_forward_length"), 172u);
  EXPECT_FLOAT_EQ(f->get<float>("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(f->tensors().size(), 48u);
  for (const auto &t : f->tensors()) EXPECT_EQ(t.dtype, MINFER_DTYPE_F32) << t.name;
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").size(), 512u);
  EXPECT_EQ(f->get<std::string>("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id"), 1);
  const auto &emb = f->tensor("token_embd.weight");
  EXPECT_EQ(emb.shape[0], 64);
  EXPECT_EQ(emb.shape[1], 512);
  EXPECT_EQ(emb.n_bytes, 64u * 512 * 4);
  EXPECT_NE(f->find_tensor("output.weight"), nullptr);  // untied
}

TEST(GgufRead, TinyRandomLlamaHasF16AndTheLlama2Vocabulary) {
  REQUIRE_TESTDATA(td);
  const auto f = minfer::gguf::File::open(td + "/models/llama-2-tiny-random.gguf");
  int f16 = 0, f32 = 0;
  for (const auto &t : f->tensors()) (t.dtype == MINFER_DTYPE_F16 ? f16 : f32) += t.dtype == MINFER_DTYPE_F16 || t.dtype == MINFER_DTYPE_F32;
  EXPECT_EQ(f16, 9);
  EXPECT_EQ(f32, 3);
  EXPECT_EQ(f->get<uint32_t>("llama.embedding_length"), 8u);
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").size(), 32000u);
}

TEST(GgufRead, EveryTestdataFileParses) {
  REQUIRE_TESTDATA(td);
  int n = 0;
  for (const auto &e : fs::recursive_directory_iterator(td))
    if (e.path().extension() == ".gguf") {
      EXPECT_NO_THROW(minfer::gguf::File::open(e.path().string())) << e.path();
      ++n;
    }
  // The folder grows as test data is added: what counts is that each file parses, and that
  // the walk found any at all.
  EXPECT_GT(n, 0) << "no .gguf file under " << td;
}

TEST(GgufRead, TypedAccessorErrorsNameFileAndKey) {
  REQUIRE_TESTDATA(td);
  const std::string path = td + "/models/stories260K.gguf";
  const auto f = minfer::gguf::File::open(path);
  try {
    f->get<uint32_t>("qwen2.block_count");
    FAIL();
  } catch (const minfer::Error &e) {
    EXPECT_EQ(std::string(e.what()), path + ": metadata key 'qwen2.block_count' is missing");
  }
  try {
    f->get<float>("llama.block_count");
    FAIL();
  } catch (const minfer::Error &e) {
    EXPECT_EQ(std::string(e.what()), path + ": metadata key 'llama.block_count' is uint32, expected float32");
  }
}

TEST(GgufRead, NotAGgufFileAndMissingFile) {
  const fs::path p = temp_dir() / "text.gguf";
  std::ofstream(p) << "hello, this is not a model";
  try {
    minfer::gguf::File::open(p.string());
    FAIL();
  } catch (const minfer::Error &e) {
    EXPECT_NE(std::string(e.what()).find(p.string() + ": at byte 0: not a GGUF file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(minfer::gguf::File::open("/nonexistent.gguf"), minfer::Error);
}

// Every hand-made malformed file is refused with its expected message, never a crash.
TEST(GgufMalformed, CorpusYieldsExpectedErrors) {
  const fs::path dir = temp_dir() / "malformed";
  fs::create_directories(dir);
  int n = 0;
  for (const auto &m : minfer::test::malformed_corpus()) {
    const fs::path p = dir / (m.name + ".gguf");
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char *>(m.bytes.data()), std::streamsize(m.bytes.size()));
    try {
      minfer::gguf::File::open(p.string());
      ADD_FAILURE() << m.name << ": accepted";
    } catch (const minfer::Error &e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p.string() + ": "), std::string::npos) << m.name << ": no file name in: " << msg;
      EXPECT_NE(msg.find(m.expect), std::string::npos) << m.name << ": expected '" << m.expect << "' in: " << msg;
    }
    ++n;
  }
  EXPECT_GT(n, 40);
  // The unmodified base file is valid, as GGUF v3 and v2 (same layout, u64 counts).
  {
    auto v2 = minfer::test::valid_spec();
    v2.version = 2;
    const auto b = minfer::test::build(v2).bytes;
    EXPECT_EQ(minfer::gguf::File::parse(b.data(), b.size(), "v2")->version(), 2u);
  }
  const auto valid = minfer::test::build(minfer::test::valid_spec()).bytes;
  const auto f = minfer::gguf::File::parse(valid.data(), valid.size(), "valid");
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->find("test.nested")->arr().size(), 2u);
}

// Every metadata type, nested arrays and tensors survive write -> read -> write byte-identically.
TEST(GgufWrite, RoundTripIsIdentical) {
  using minfer::gguf::Value;
  using minfer::gguf::ValueType;
  const fs::path a = temp_dir() / "a.gguf", b = temp_dir() / "b.gguf";
  std::vector<std::vector<uint8_t>> data;
  {
    minfer::gguf::Writer w(64);
    w.set("t.u8", {ValueType::U8, uint64_t(200)});
    w.set("t.i8", {ValueType::I8, int64_t(-100)});
    w.set("t.u16", {ValueType::U16, uint64_t(60000)});
    w.set("t.i16", {ValueType::I16, int64_t(-30000)});
    w.set("t.u32", Value::u32(4000000000u));
    w.set("t.i32", Value::i32(-2000000000));
    w.set("t.u64", Value::u64(uint64_t(1) << 63));
    w.set("t.i64", {ValueType::I64, int64_t(-(int64_t(1) << 62))});
    w.set("t.f32", Value::f32(3.25f));
    w.set("t.f64", {ValueType::F64, 2.718281828459045});
    w.set("t.bool", Value::boolean(true));
    w.set("t.str", Value::str("héllo\nworld"));
    w.set("t.arr", Value::array(ValueType::ARRAY, {Value::strings({"a", "b"}), Value::strings({})}));
    std::mt19937 rng(5);
    for (auto [name, dtype, d0, d1] : std::vector<std::tuple<std::string, int32_t, int64_t, int64_t>>{
             {"x.f32", MINFER_DTYPE_F32, 7, 3}, {"x.q4_k", MINFER_DTYPE_Q4_K, 512, 2}, {"x.f16", MINFER_DTYPE_F16, 5, 1}}) {
      const uint64_t n = w.add_tensor(name, dtype, {d0, d1});
      data.emplace_back(n);
      for (auto &byte : data.back()) byte = uint8_t(rng());
    }
    w.begin(a.string());
    for (const auto &d : data) w.write_data(d.data(), d.size());
    w.finish();
  }
  const auto f = minfer::gguf::File::open(a.string());
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->get<uint8_t>("t.u8"), 200);
  EXPECT_EQ(f->get<int8_t>("t.i8"), -100);
  EXPECT_EQ(f->get<uint64_t>("t.u64"), uint64_t(1) << 63);
  EXPECT_EQ(f->get<int64_t>("t.i64"), -(int64_t(1) << 62));
  EXPECT_EQ(f->get<float>("t.f32"), 3.25f);
  EXPECT_EQ(f->get<double>("t.f64"), 2.718281828459045);
  EXPECT_EQ(f->get<std::string>("t.str"), "héllo\nworld");
  EXPECT_EQ(f->find("t.arr")->arr().items()[0].arr().items()[1].to_string(), "\"b\"");
  ASSERT_EQ(f->tensors().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f->tensors()[i].data - f->tensors()[0].data, int64_t(f->tensors()[i].offset));
    EXPECT_EQ(f->tensors()[i].offset % 64, 0u);
    EXPECT_EQ(std::vector<uint8_t>(f->tensors()[i].data, f->tensors()[i].data + f->tensors()[i].n_bytes), data[i]);
  }
  {
    minfer::gguf::Writer w(f->alignment());
    for (const auto &[k, v] : f->metadata()) w.set(k, v);
    for (const auto &t : f->tensors()) w.add_tensor(t.name, t.dtype, std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.n_dims));
    w.begin(b.string());
    for (const auto &t : f->tensors()) w.write_data(t.data, t.n_bytes);
    w.finish();
  }
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  const std::string sa((std::istreambuf_iterator<char>(fa)), {}), sb((std::istreambuf_iterator<char>(fb)), {});
  EXPECT_EQ(sa, sb);
}

// A mapped file's arrays stay in its bytes until asked for: what they read as must equal the
// same bytes decoded eagerly (File::parse), through items(), get_strings and get_numbers.
TEST(GgufRead, ArraysReadInPlaceEqualDecodedOnes) {
  using minfer::gguf::Value;
  using minfer::gguf::ValueType;
  const fs::path a = temp_dir() / "arrays.gguf";
  {
    minfer::gguf::Writer w(32);
    w.set("t.strings", Value::strings({"", "a", "héllo", std::string(300, 'x')}));
    w.set("t.i32", Value::array(ValueType::I32, {Value::i32(-5), Value::i32(7), Value::i32(2000000000)}));
    w.set("t.f32", Value::array(ValueType::F32, {Value::f32(0.5f), Value::f32(-1e-3f)}));
    w.set("t.u8", Value::array(ValueType::U8, {Value{ValueType::U8, uint64_t(255)}}));
    w.set("t.bools", Value::array(ValueType::BOOL, {Value::boolean(true), Value::boolean(false)}));
    w.set("t.empty", Value::array(ValueType::I32, {}));
    w.begin(a.string());
    w.finish();
  }
  std::ifstream in(a, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const auto lazy = minfer::gguf::File::open(a.string());
  const auto eager = minfer::gguf::File::parse(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size(), "arrays");
  EXPECT_NE(lazy->find("t.strings")->arr().raw(), nullptr);  // in place until asked for
  EXPECT_EQ(eager->find("t.strings")->arr().raw(), nullptr);
  EXPECT_EQ(lazy->get_strings("t.strings"), (std::vector<std::string>{"", "a", "héllo", std::string(300, 'x')}));
  EXPECT_EQ(lazy->get_strings("t.strings"), eager->get_strings("t.strings"));
  EXPECT_EQ(lazy->get_numbers("t.i32"), (std::vector<double>{-5, 7, 2000000000}));
  EXPECT_EQ(lazy->get_numbers("t.f32"), eager->get_numbers("t.f32"));
  EXPECT_EQ(lazy->get_numbers("t.u8"), std::vector<double>{255});
  EXPECT_TRUE(lazy->get_numbers("t.empty").empty());
  EXPECT_THROW(lazy->get_numbers("t.strings"), minfer::Error);
  EXPECT_THROW(lazy->get_strings("t.i32"), minfer::Error);
  for (const auto &[key, v] : eager->metadata()) {
    const Value *l = lazy->find(key);
    ASSERT_NE(l, nullptr) << key;
    EXPECT_EQ(l->to_string(100), v.to_string(100)) << key;
    if (v.type == ValueType::ARRAY) EXPECT_EQ(l->arr().items().size(), v.arr().size()) << key;
  }
}

TEST(GgufWrite, IncompleteDataIsAnErrorAndLeavesNoFile) {
  const fs::path p = temp_dir() / "incomplete.gguf";
  {
    minfer::gguf::Writer w;
    w.add_tensor("t", MINFER_DTYPE_F32, {8});
    w.begin(p.string());
    w.write_data("1234", 4);
    EXPECT_THROW(w.finish(), minfer::Error);
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p.string() + ".part"));
}

// Round-to-nearest error bounds on N(0, 1) data: ||dequant(quant(x)) - x|| / ||x||.
// Documented in docs/QUANTIZATION.md; measured values sit well inside.
struct Bound {
  int32_t dtype;
  double max_rel_rmse;
};

class QuantRoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(QuantRoundTrip, ErrorWithinBound) {
  const Bound b = GetParam();
  const int64_t rows = 64, len = 1024;
  std::vector<float> x(size_t(rows * len)), y(x.size());
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (auto &v : x) v = nd(rng);
  const minfer_dtype_traits t = minfer_dtype_info(b.dtype);
  std::vector<uint8_t> q(size_t(rows * len / t.block_values * t.block_bytes)), q1(q.size());
  minfer::quant::quantize_rows(b.dtype, x.data(), q.data(), rows, len, 2);
  minfer::quant::quantize_rows(b.dtype, x.data(), q1.data(), rows, len, 1);
  EXPECT_EQ(q, q1) << "threads must not change the bytes";
  minfer::quant::dequantize_row(b.dtype, q.data(), y.data(), rows * len);
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) err += (double(y[i]) - x[i]) * (double(y[i]) - x[i]), ref += double(x[i]) * x[i];
  const double rel = std::sqrt(err / ref);
  RecordProperty("rel_rmse", std::to_string(rel));
  std::printf("%s: relative RMSE %.4f (bound %.3f)\n", t.name, rel, b.max_rel_rmse);
  EXPECT_LE(rel, b.max_rel_rmse) << t.name;
  EXPECT_GT(rel, 0.0) << t.name << ": a lossy type cannot be exact on random data";
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, QuantRoundTrip,
    ::testing::Values(Bound{MINFER_DTYPE_Q8_0, 0.006}, Bound{MINFER_DTYPE_Q6_K, 0.03}, Bound{MINFER_DTYPE_Q5_0, 0.06},
                      Bound{MINFER_DTYPE_Q5_1, 0.06}, Bound{MINFER_DTYPE_Q5_K, 0.06}, Bound{MINFER_DTYPE_Q4_0, 0.12},
                      Bound{MINFER_DTYPE_Q4_1, 0.12}, Bound{MINFER_DTYPE_Q4_K, 0.12}, Bound{MINFER_DTYPE_Q3_K, 0.25},
                      Bound{MINFER_DTYPE_Q2_K, 0.50},
                      // The non-linear 4-bit types fit Gaussian weights better than Q4_0 (0.086 here).
                      Bound{MINFER_DTYPE_IQ4_NL, 0.08}, Bound{MINFER_DTYPE_IQ4_XS, 0.08}),
    [](const auto &info) { return std::string(minfer_dtype_name(info.param.dtype)); });

TEST(Quantize, Q4_0MatchesLlamaCppRounding) {
  // x = j - 16 for j in 0..31: max magnitude -16 -> d = -16 / -8 = 2; q = x / 2 + 8.5 truncated.
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = float(j - 16);
  minfer_block_q4_0 b;
  minfer::quant::quantize_row(MINFER_DTYPE_Q4_0, x, &b, 32);
  EXPECT_EQ(minfer::quant::f16_to_f32(b.d), 2.0f);
  EXPECT_EQ(b.qs[0] & 15, 0);           // -16 / 2 + 8.5 = 0.5 -> 0
  EXPECT_EQ(b.qs[1] & 15, 1);           // -15 / 2 + 8.5 = 1.0 -> 1
  EXPECT_EQ(b.qs[15] >> 4, 15);         // 15 / 2 + 8.5 = 16 -> clamped to 15
}

TEST(TypePolicy, OutputSensitiveMixAndFallbacks) {
  using minfer::quant::choose_type;
  const auto q4 = minfer::quant::parse_file_type("q4_0");
  EXPECT_EQ(choose_type(q4, "token_embd.weight", {896, 151936}, 0, 24, false).dtype, MINFER_DTYPE_Q8_0);  // tied, 896 % 256
  EXPECT_EQ(choose_type(q4, "output.weight", {3584, 152064}, 0, 28, true).dtype, MINFER_DTYPE_Q6_K);
  EXPECT_EQ(choose_type(q4, "token_embd.weight", {3584, 152064}, 0, 28, true).dtype, MINFER_DTYPE_Q4_0);
  EXPECT_EQ(choose_type(q4, "blk.0.attn_norm.weight", {896}, 0, 24, true).dtype, MINFER_DTYPE_F32);
  const auto km = minfer::quant::parse_file_type("q4_k_m");
  EXPECT_EQ(choose_type(km, "blk.0.ffn_down.weight", {4864, 896}, 0, 24, false).dtype, MINFER_DTYPE_Q6_K);
  EXPECT_EQ(choose_type(km, "blk.4.ffn_down.weight", {4864, 896}, 0, 24, false).dtype, MINFER_DTYPE_Q4_K);
  const auto c = choose_type(km, "blk.5.attn_q.weight", {896, 896}, 0, 24, false);
  EXPECT_EQ(c.dtype, MINFER_DTYPE_Q5_0);
  EXPECT_NE(c.note.find("do not fill q4_k blocks of 256"), std::string::npos) << c.note;
  EXPECT_EQ(choose_type(q4, "blk.0.ffn_down.weight", {172, 64}, MINFER_DTYPE_F32, 5, true).dtype, MINFER_DTYPE_F32);
  EXPECT_THROW(minfer::quant::parse_file_type("q4_z"), minfer::Error);
  // IQ4_XS rows of 896 fall back to IQ4_NL (32-value blocks), as llama-quantize does.
  const auto xs = minfer::quant::parse_file_type("iq4_xs");
  EXPECT_EQ(choose_type(xs, "blk.5.attn_q.weight", {896, 896}, 0, 24, false).dtype, MINFER_DTYPE_IQ4_NL);
  EXPECT_EQ(choose_type(xs, "blk.5.ffn_up.weight", {1024, 4864}, 0, 24, false).dtype, MINFER_DTYPE_IQ4_XS);
  // So do Q2_K's and Q3_K's (llama.cpp's Q2_K/Q3_K files of small Qwens hold IQ4_NL).
  EXPECT_EQ(choose_type(minfer::quant::parse_file_type("q3_k"), "blk.5.attn_q.weight", {896, 896}, 0, 24, false).dtype, MINFER_DTYPE_IQ4_NL);
}

TEST(Synth, TinyQwen2TensorSetSeedAndVocab) {
  REQUIRE_TESTDATA(td);
  const fs::path a = temp_dir() / "t1.gguf", b = temp_dir() / "t2.gguf", c = temp_dir() / "t3.gguf";
  minfer::synth::Options o;
  o.arch = "qwen2";
  o.preset = "tiny";
  o.type = "q8_0";
  o.seed = 3;
  o.vocab_path = td + "/vocab/ggml-vocab-qwen2.gguf";
  o.out = a.string();
  minfer::synth::synthesize(o);
  o.out = b.string();
  minfer::synth::synthesize(o);
  o.seed = 4;
  o.out = c.string();
  minfer::synth::synthesize(o);
  auto slurp = [](const fs::path &p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), {});
  };
  EXPECT_EQ(slurp(a), slurp(b)) << "same seed, same bytes";
  EXPECT_NE(slurp(a), slurp(c)) << "another seed, other weights";

  const auto f = minfer::gguf::File::open(a.string());
  EXPECT_EQ(f->architecture(), "qwen2");
  EXPECT_EQ(f->get_strings("tokenizer.ggml.tokens").size(), 151936u);
  EXPECT_EQ(f->get<std::string>("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f->tensors().size(), 2u + 2 * 12);  // embed, output norm; 12 per layer
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr) << "tiny Qwen2 ties its embeddings";
  for (const char *n : {"blk.1.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias", "blk.0.ffn_gate.weight"})
    EXPECT_NE(f->find_tensor(n), nullptr) << n;
  // Weights ~ N(0, 0.02), norms ~ 1.
  std::vector<float> w(256 * 512);
  const auto &up = f->tensor("blk.0.ffn_up.weight");
  minfer::quant::dequantize_row(up.dtype, up.data, w.data(), int64_t(w.size()));
  double s = 0, s2 = 0;
  for (float v : w) s += v, s2 += double(v) * v;
  EXPECT_NEAR(s / double(w.size()), 0.0, 0.001);
  EXPECT_NEAR(std::sqrt(s2 / double(w.size())), 0.02, 0.001);
  float norm[256];
  minfer::quant::dequantize_row(MINFER_DTYPE_F32, f->tensor("blk.0.attn_norm.weight").data, norm, 256);
  for (float v : norm) EXPECT_NEAR(v, 1.0f, 0.15f);
  fs::remove(a), fs::remove(b), fs::remove(c);
}

TEST(Synth, SevenBPresetShapes) {
  const auto p = minfer::synth::find_preset("qwen2", "7b");
  EXPECT_EQ(p.n_embd, 3584);
  EXPECT_EQ(p.n_layer, 28);
  EXPECT_EQ(p.n_head, 28);
  EXPECT_EQ(p.n_head_kv, 4);
  EXPECT_EQ(p.n_ff, 18944);
  EXPECT_EQ(p.n_vocab, 152064);
  EXPECT_FALSE(p.tied_embeddings);
  EXPECT_THROW(minfer::synth::find_preset("qwen2", "3b"), minfer::Error);
}

}  // namespace
