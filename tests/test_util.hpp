// tests/test_util.hpp — shared helpers: random valid blocks, paths to built plugins.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/run_config.hpp"
#include "minfer/blocks.h"
#include "runtime/plugin.hpp"
#include "minfer/dtype.h"
#include "quant/reference.hpp"
#include "gguf/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace minfer::test {

// A constraint automaton's answers to a text (State: sampling::SchemaState or GrammarState,
// made from its compiled definition): the whole text is a value; every character taken but no
// whole value yet; some character refused.
template <class State, class Def>
bool takes_whole(const Def &d, const std::string &text) {
  State s(d);
  return s.feed(text) && s.can_end();
}
template <class State, class Def>
bool takes_prefix_only(const Def &d, const std::string &text) {
  State s(d);
  return s.feed(text) && !s.can_end();
}
template <class State, class Def>
bool refuses(const Def &d, const std::string &text) {
  State s(d);
  return !s.feed(text);
}

// ../shared/testdata: MINFER_TESTDATA if set, else the path the build saw, else a bundle's
// copy beside the build (.gpu/testdata for .gpu/build/bin/...). "" when absent.
inline std::string testdata_dir() {
  namespace fs = std::filesystem;
  if (const char *env = std::getenv("MINFER_TESTDATA"))
    if (fs::exists(env)) return env;
#ifdef MINFER_TESTDATA_DIR
  if (fs::exists(MINFER_TESTDATA_DIR)) return MINFER_TESTDATA_DIR;
#endif
  const fs::path bundled = fs::canonical("/proc/self/exe").parent_path().parent_path().parent_path() / "testdata";
  return fs::exists(bundled) ? bundled.string() : "";
}

// True when every backend of the run config opens here with a device (the CUDA cases need a
// GPU); else why says why not.
inline bool backends_usable(const RunConfig &cfg, std::string &why) {
  for (const auto &b : cfg.backends) {
    try {
      auto p = find_plugin(b.plugin_name(), b.plugin_path, plugin_search_dirs(""));
      if (p->device_count(&why) == 0) return false;
    } catch (const Error &e) {
      why = e.what();
      return false;
    }
  }
  return true;
}

// Every block dtype the ABI defines (the coverage checks iterate this list).
inline std::vector<int32_t> block_dtypes() {
  return {MINFER_DTYPE_Q4_0, MINFER_DTYPE_Q4_1, MINFER_DTYPE_Q5_0, MINFER_DTYPE_Q5_1,
          MINFER_DTYPE_Q8_0, MINFER_DTYPE_Q8_1, MINFER_DTYPE_Q2_K, MINFER_DTYPE_Q3_K,
          MINFER_DTYPE_Q4_K, MINFER_DTYPE_Q5_K, MINFER_DTYPE_Q6_K, MINFER_DTYPE_Q8_K,
          MINFER_DTYPE_IQ4_NL, MINFER_DTYPE_IQ4_XS};
}

// Byte offsets of a block type's f16 scale fields (random bits there could be NaN/Inf).
inline std::vector<size_t> half_fields(int32_t dtype) {
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: return {offsetof(minfer_block_q4_0, d)};
    case MINFER_DTYPE_Q4_1: return {offsetof(minfer_block_q4_1, d), offsetof(minfer_block_q4_1, m)};
    case MINFER_DTYPE_Q5_0: return {offsetof(minfer_block_q5_0, d)};
    case MINFER_DTYPE_Q5_1: return {offsetof(minfer_block_q5_1, d), offsetof(minfer_block_q5_1, m)};
    case MINFER_DTYPE_Q8_0: return {offsetof(minfer_block_q8_0, d)};
    case MINFER_DTYPE_Q8_1: return {offsetof(minfer_block_q8_1, d), offsetof(minfer_block_q8_1, s)};
    case MINFER_DTYPE_Q2_K: return {offsetof(minfer_block_q2_k, d), offsetof(minfer_block_q2_k, dmin)};
    case MINFER_DTYPE_Q3_K: return {offsetof(minfer_block_q3_k, d)};
    case MINFER_DTYPE_Q4_K: return {offsetof(minfer_block_q4_k, d), offsetof(minfer_block_q4_k, dmin)};
    case MINFER_DTYPE_Q5_K: return {offsetof(minfer_block_q5_k, d), offsetof(minfer_block_q5_k, dmin)};
    case MINFER_DTYPE_Q6_K: return {offsetof(minfer_block_q6_k, d)};
    case MINFER_DTYPE_IQ4_NL: return {offsetof(minfer_block_iq4_nl, d)};
    case MINFER_DTYPE_IQ4_XS: return {offsetof(minfer_block_iq4_xs, d)};
    default: return {};
  }
}

// n_blocks of random but valid blocks: random quant bits, finite scales of either sign.
inline std::vector<uint8_t> random_blocks(int32_t dtype, int64_t n_blocks, uint32_t seed) {
  const minfer_dtype_traits t = minfer_dtype_info(dtype);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  std::vector<uint8_t> out(size_t(n_blocks) * size_t(t.block_bytes));
  for (auto &b : out) b = uint8_t(byte(rng));
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t *blk = out.data() + size_t(b) * size_t(t.block_bytes);
    for (size_t off : half_fields(dtype)) {
      const uint16_t h = quant::f32_to_f16(scale(rng));
      std::memcpy(blk + off, &h, 2);
    }
    if (dtype == MINFER_DTYPE_Q8_K) {
      const float d = scale(rng);
      std::memcpy(blk, &d, 4);
    }
  }
  return out;
}

// Qwen2's tokenizer (151,936 tokens) from the test data, or null without it.
inline std::unique_ptr<tokenizer::Tokenizer> qwen2_tokenizer() {
  const std::string td = testdata_dir();
  if (td.empty()) return nullptr;
  const auto f = gguf::File::open(td + "/vocab/ggml-vocab-qwen2.gguf");
  return tokenizer::Tokenizer::from_gguf(*f);
}

}  // namespace minfer::test
