// The CUDA backend against the CPU backend on whole models: synthetic Qwen2 "tiny" models of
// every weight type, teacher-forced over 256 tokens (all logits of one prefill step and of
// single-token decode steps). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "common/error.hpp"
#include "config/run_config.hpp"
#include "models/model.hpp"
#include "runtime/generator.hpp"
#include "runtime/placement.hpp"
#include "runtime/plugin.hpp"
#include "runtime/session.hpp"
#include "cuda_available.hpp"
#include "synth/synth.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

struct Logits {
  std::vector<float> v;  // n_tokens x n_vocab
};

Logits run(const std::shared_ptr<minfer::gguf::File> &file, const std::string &backend, const std::vector<int32_t> &tokens,
           bool one_by_one) {
  minfer::models::BuildOptions bo;
  bo.n_ctx = 512;
  bo.max_batch = 256;
  bo.kv_type = MINFER_DTYPE_F16;
  bo.all_logits = true;
  const auto model = minfer::models::load_model(file, bo);
  // backend: a name ("cpu") or a name with its options ("cpu: {isa: avx2}").
  const std::string entry = backend.find(':') == std::string::npos ? backend + ": {}" : backend;
  const auto cfg = minfer::parse_run_config("backends: {" + entry + "}\n", "test.yaml");
  minfer::BackendSet backends = minfer::open_backends(cfg);
  minfer::Session session(model->graph, cfg, backends);
  minfer::Generator gen(*model, session);
  Logits out;
  if (!one_by_one) {
    out.v = gen.feed(tokens);
  } else {
    for (int32_t t : tokens) {
      const auto l = gen.feed({t});
      out.v.insert(out.v.end(), l.begin(), l.end());
    }
  }
  return out;
}

// Synthesizes `preset` at `type`, then compares the CPU's and CUDA's logits: one prefill step of
// n_prefill tokens and n_decode single-token steps (graph replays).
// outlier_share: the share of positions allowed past max_rel_diff (mixture-of-experts models:
// a token whose k-th and next router logits are within rounding takes another expert on each
// backend, and its logits then differ by about their size).
void expect_backends_agree(const std::string &preset, const std::string &type, int64_t n_prefill, int64_t n_decode,
                           double max_rel_diff, int64_t layers = 0, const std::string &arch = "qwen2", double outlier_share = 0,
                           const std::string &cpu = "cpu", const std::string &other = "cuda") {
  const fs::path path = fs::temp_directory_path() / ("minfer-" + arch + "-" + preset + "-" + type + ".gguf");
  minfer::synth::Options o;
  o.layers = layers;
  o.arch = arch;
  o.preset = preset;
  o.type = type;
  o.seed = 5;
  o.out = path.string();
  minfer::synth::synthesize(o);
  auto file = minfer::gguf::File::open(path.string());
  const int64_t n_vocab = file->tensor("token_embd.weight").shape[1];

  std::mt19937 rng(9);
  std::vector<int32_t> tokens(std::max(n_prefill, n_decode));
  for (auto &t : tokens) t = int32_t(rng() % uint32_t(std::min<int64_t>(n_vocab, 50000)));  // Phi-3: 32,064 tokens
  for (const bool one_by_one : {false, true}) {
    const std::vector<int32_t> feed(tokens.begin(), tokens.begin() + (one_by_one ? n_decode : n_prefill));
    const Logits a = run(file, cpu, feed, one_by_one), b = run(file, other, feed, one_by_one);
    ASSERT_EQ(a.v.size(), b.v.size());
    // Random-weight models have flat logits: many positions are near-ties that either
    // backend's rounding may flip. Agreement is required where the CPU's best token leads its
    // runner-up by more than twice the largest CPU/CUDA difference at that position (a flip
    // there is a bug, not rounding); the raw agreement is printed too.
    int64_t agree = 0, clear = 0, agree_clear = 0, outliers = 0;
    double worst = 0;
    const int64_t n = int64_t(feed.size());
    for (int64_t t = 0; t < n; ++t) {
      const float *x = a.v.data() + t * n_vocab, *y = b.v.data() + t * n_vocab;
      double ss = 0, diff = 0;
      for (int64_t i = 0; i < n_vocab; ++i) ss += double(x[i]) * x[i], diff = std::max(diff, std::fabs(double(x[i]) - y[i]));
      const double rel = diff / std::sqrt(ss / double(n_vocab));  // relative to the logits' RMS
      worst = std::max(worst, rel);
      outliers += rel > max_rel_diff;
      const int64_t ta = std::max_element(x, x + n_vocab) - x, tb = std::max_element(y, y + n_vocab) - y;
      float second = -INFINITY;
      for (int64_t i = 0; i < n_vocab; ++i)
        if (i != ta) second = std::max(second, x[i]);
      agree += ta == tb;
      if (double(x[ta]) - second > 2 * diff) ++clear, agree_clear += ta == tb;
    }
    const double top1 = double(agree) / double(n), top1_clear = clear ? double(agree_clear) / double(clear) : 1.0;
    std::printf("%s%s %s %s x%lld: top-1 agreement %.1f%% (%.1f%% of %lld clear positions), max |cpu - %s| / rms(logits) = %.3g"
                " (%lld positions over %.3g)\n",
                cpu == "cpu" ? "" : ("[" + cpu + "] ").c_str(), preset.c_str(), type.c_str(), one_by_one ? "decode" : "prefill", (long long)n, 100 * top1, 100 * top1_clear,
                (long long)clear, other.c_str(), worst, (long long)outliers, max_rel_diff);
    EXPECT_GE(top1_clear, 0.99) << type;
    // The raw bar only guards against wholesale disagreement: over 32 decode positions each
    // near-tie flip costs 3.1%, and which ties flip moves with any change in summation order
    // (or with the CPU the test runs on). A tenth of the positions may flip, one at least: over
    // 8 positions a single near-tie is 12.5%.
    EXPECT_GE(agree, n - std::max<int64_t>(1, n / 10)) << type << ": top-1 agreement " << 100 * top1 << "%";
    // Both backends quantize activations to 8 bits for Q4_0/Q8_0 weights (in different
    // places), so their logits may differ by a few percent of the logits' size; a wrong
    // kernel differs by ~100%.
    // The share applies to prefill steps; single steps run the same kernels on every token.
    const double share = one_by_one ? 0.0 : outlier_share;
    if (share == 0) EXPECT_LE(worst, max_rel_diff) << type;
    EXPECT_LE(double(outliers), std::floor(share * double(n))) << type << ": positions past " << max_rel_diff;
  }
  fs::remove(path);
}

class CudaVsCpu : public ::testing::TestWithParam<std::string> {};

// tiny: 256 tokens in one prefill step, the first 32 one at a time.
TEST_P(CudaVsCpu, TeacherForcedLogitsAgree) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  expect_backends_agree("tiny", GetParam(), 256, 32, 0.1);
}

// Two blocks of the 1.5B's width (rows of 1536 and 8960 values) take the one-token paths the
// tiny model's short rows never reach: grouped Q/K/V, gate/up and down over rows read in
// 16-byte pieces (gemv.cu's staged rows). Two blocks, not 28: the whole 1.5B's random weights
// amplify rounding differences layer by layer (max |cpu - cuda| / rms 0.18 at decode there,
// the same with the staged rows turned off), which would hide a kernel's error. At this width
// the activations' 8-bit rounding differs more between the backends than at the tiny one's:
// measured on the H200, prefill 0.116-0.134 and decode 0.055-0.079 of the logits' RMS, so
// the bound is 0.2 (a wrong row or part is off by ~100%).
TEST(CudaVsCpuWide, DecodeStepsAgree) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q8_0", "q4_0", "q4_k_m"}) expect_backends_agree("1.5b", type, 16, 8, 0.2, 2);
}

// Rows of more than one 2 KiB chunk of the staged GEMVs' rings (LLaMA-7B's 4096 values: Q4_0
// 2,304 bytes, Q8_0 4,352, Q4_K 2,304), chunks starting off 16 bytes (Q4_0, Q8_0) and on them
// (Q4_K's aligned unpacking), in the gate and up rows taken as pairs; down's 11,008 values.
TEST(CudaVsCpuWide, MultiChunkRowsAgree) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q8_0", "q4_0", "q4_k_m"}) expect_backends_agree("7b", type, 16, 8, 0.2, 2, "llama");
}

// Two blocks of Qwen2-7B: its ffn_down's 3,584 rows of 18,944 values take the one-token GEMV's
// 28-warp blocks (a warp a row on a 132-SM GPU), Q4_K_M's in Q6_K where llama.cpp's mix gives
// a layer more bits; its lm_head Q6_K rows of 14 blocks in chunks of 9 and 5. A prefill of 4
// (the decode steps are the point): at 16 positions this width's random logits had two
// near-ties flip under MMQ's rounding (H100, Q4_K_M: all 8 clear positions agreed).
TEST(CudaVsCpuWide, DeepDownRowsAgree) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q8_0", "q4_0", "q4_k_m"}) expect_backends_agree("7b", type, 4, 8, 0.2, 2);
}

// Two blocks of the 0.5B: its lm_head's 151,936 rows of 896 values take the staged GEMV (rows
// of at most 1024 values stream through the warps' rings where a launch has very many of
// them), its layers' short rows the per-lane path; Q4_K_M's lm_head is Q6_K.
TEST(CudaVsCpuWide, ShortRowLmHeadAgrees) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q8_0", "q4_0", "q4_k_m"}) expect_backends_agree("0.5b", type, 16, 8, 0.2, 2);
}

// The other architectures' tiny presets (Qwen3: per-head norms, 128-value heads; Phi-3: fused
// weights read as row ranges; Gemma 2/3: GELU, caps, sliding windows) through the quantized
// paths, and Phi-3's LongRoPE one (partial rotary, long/short factors, the attention factor).
TEST(CudaVsCpuArchs, TinyModelsAgree) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  // Gemma's prefill differs more (H200: 0.11-0.16 of the logits' RMS, top-1 100% on clear
  // positions, decode steps 1e-6 at Q8_0): CUDA's prefill matmuls round activations to 8 bits
  // in other blocks than the CPU's, and Gemma's extra norms and sqrt(n_embd) scale carry that
  // further; its F16/F32 files match llama.cpp within 1e-3 on CUDA (ArchReference).
  for (const char *arch : {"qwen3", "phi3", "gemma2", "gemma3"}) {
    const double bound = std::string(arch).rfind("gemma", 0) == 0 ? 0.2 : 0.1;
    for (const char *type : {"q8_0", "q4_k_m"}) expect_backends_agree("tiny", type, 256, 32, bound, 0, arch);
  }
  expect_backends_agree("tiny-longrope", "q8_0", 256, 32, 0.1, 0, "phi3");
}

// Qwen3-MoE's tiny preset (8 experts, 2 used) through the expert kernels: CUDA's dp4a
// MATMUL_ID (gate, up and SwiGLU in one launch) for the int8 block types, its generic one for
// F16, against the CPU's grouped matmuls. In a prompt step a token whose 2nd and 3rd router
// logits lie within the backends' rounding takes another expert on each (the router's input
// comes through quantized attention matmuls that round activations in other blocks), and its
// logits then differ by about their size. H200: 3-106 of 256 positions past 0.1 for the int8
// types, more with the CPU's AMX bf16 tiles than with its int8 GEMM (AVX2: 20), none at F16,
// none in the single steps; the kernels themselves match in the conformance suite (200 rows).
// So a prompt may have up to half its positions past the bound, top-1 must hold on every
// clear position, and the single steps get no allowance.
TEST(CudaVsCpuArchs, TinyMoeAgrees) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q4_0", "q8_0", "q4_k_m", "f16"}) expect_backends_agree("tiny", type, 256, 32, 0.1, 0, "qwen3moe", 0.5);
  for (const char *type : {"q4_0", "q8_0"}) expect_backends_agree("tiny", type, 256, 32, 0.1, 0, "qwen3moe", 0.5, "cpu: {isa: avx2}");
}

// A decode token's gate/up experts through the staged GEMV's rings (staged_expert_pairs:
// gemv_staged_experts_kernel, the rows' addresses from the ids): the tiny Qwen3-MoE at the
// block types of TinyMoeAgrees, on a grid of five blocks too (each warp rows of several
// pairs), and two layers of the 30B-A3B preset (eight of 128 experts, 768 rows of 2048
// values a gate) against the CPU.
TEST(CudaVsCpuArchs, StagedExpertPairsAgree) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q4_0", "q8_0", "q4_k_m"})
    expect_backends_agree("tiny", type, 256, 32, 0.1, 0, "qwen3moe", 0.5, "cpu", "cuda: {staged_expert_pairs: true}");
  expect_backends_agree("tiny", "q4_k_m", 256, 32, 0.1, 0, "qwen3moe", 0.5, "cpu", "cuda: {staged_expert_pairs: true, max_grid_blocks: 5}");
  expect_backends_agree("30b-a3b", "q4_k_m", 4, 8, 0.2, 2, "qwen3moe", 0.5, "cpu", "cuda: {staged_expert_pairs: true}");
}

// A decode token's routed FFN in one launch (ffn_decode_kernel: the router, gate/up and
// down experts as stages of one grid) computes each stage as its three launches do, in the
// same order: the logits bit for bit those with moe_ffn_fused off, also on a grid of five
// blocks (each block then several router rows, gate/up items and down rows).
TEST(CudaVsCpuArchs, OneLaunchMoeFfnMatchesItsSteps) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q4_0", "q8_0", "q4_k_m", "q6_k", "iq4_xs"})
    expect_backends_agree("tiny", type, 16, 32, 0.0, 0, "qwen3moe", 0, "cuda: {moe_ffn_fused: false}", "cuda: {moe_ffn_fused: true}");
  expect_backends_agree("tiny", "q4_k_m", 16, 32, 0.0, 0, "qwen3moe", 0, "cuda: {moe_ffn_fused: false, max_grid_blocks: 5}",
                        "cuda: {moe_ffn_fused: true, max_grid_blocks: 5}");
}

// A decode token's dense FFN in one launch (ffn_decode_kernel with dense_ffn_fused: the RMS
// norm, gate/up with the activation, down with the residual add as stages of one grid) held
// to the CPU as the separate launches are: the tiny Qwen2 (K-quant pairs: Q4_K_M's Q6_K down
// weights), two blocks of the 0.5B (896 down rows dealt over every warp of the grid, its
// 4,864-wide activations; at Q4_K_M gate and up in Q5_0 beside Q4_K and Q6_K down rows),
// Gemma 2 (GeGLU; a norm after down, so no add in the launch), and a grid of five blocks
// (each block many gate/up items and down rows).
TEST(CudaVsCpuArchs, OneLaunchDenseFfnAgrees) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::string on = "cuda: {dense_ffn_fused: true}";
  for (const char *type : {"q4_0", "q8_0", "q4_k_m", "q6_k", "iq4_xs"}) expect_backends_agree("tiny", type, 16, 32, 0.1, 0, "qwen2", 0, "cpu", on);
  for (const char *type : {"q4_0", "q4_k_m"}) expect_backends_agree("0.5b", type, 16, 8, 0.2, 2, "qwen2", 0, "cpu", on);
  expect_backends_agree("tiny", "q8_0", 16, 32, 0.2, 0, "gemma2", 0, "cpu", on);
  expect_backends_agree("tiny", "q4_k_m", 16, 32, 0.1, 0, "qwen2", 0, "cpu", "cuda: {dense_ffn_fused: true, max_grid_blocks: 5}");
}

// The same launches starting with the attention's output projection and its residual add
// (attn_out_fused: a stage 0 and a grid barrier more, x read back past L1 by every block),
// dense and routed, held to the CPU: the tiny Qwen2, two blocks of the 0.5B, the tiny
// Qwen3-MoE (whose prompt positions may take other experts, as in TinyMoeAgrees), and a grid
// of five blocks (each many projection rows).
TEST(CudaVsCpuArchs, OneLaunchFfnWithOutputProjectionAgrees) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::string dense = "cuda: {dense_ffn_fused: true, attn_out_fused: true}";
  for (const char *type : {"q4_0", "q8_0", "q4_k_m"}) expect_backends_agree("tiny", type, 16, 32, 0.1, 0, "qwen2", 0, "cpu", dense);
  for (const char *type : {"q4_0", "q4_k_m"}) expect_backends_agree("0.5b", type, 16, 8, 0.2, 2, "qwen2", 0, "cpu", dense);
  const std::string routed = "cuda: {moe_ffn_fused: true, attn_out_fused: true}";
  for (const char *type : {"q4_0", "q4_k_m"}) expect_backends_agree("tiny", type, 256, 32, 0.1, 0, "qwen3moe", 0.5, "cpu", routed);
  expect_backends_agree("tiny", "q4_k_m", 16, 32, 0.1, 0, "qwen2", 0, "cpu", "cuda: {dense_ffn_fused: true, attn_out_fused: true, max_grid_blocks: 5}");
}

// A staged chunk holding consecutive short rows (staged_row_groups, the default) changes how
// the weights travel, not what is summed: each row's dot as before, from the same offset from
// 16 bytes, so the logits are bit for bit those of one row a chunk. Two blocks of the 0.5B (its
// 151,936-row lm_head of 896 values), at Q4_0 (four rows a chunk), Q8_0 (two) and Q4_K_M (its
// Q6_K lm_head: one), and a grid of five blocks (each warp many units of rows).
TEST(CudaVsCpuArchs, StagedRowGroupsLeaveLogitsAlone) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q4_0", "q8_0", "q4_k_m"})
    expect_backends_agree("0.5b", type, 16, 8, 0.0, 2, "qwen2", 0, "cuda: {staged_row_groups: false}", "cuda");
  expect_backends_agree("0.5b", "q4_0", 16, 8, 0.0, 2, "qwen2", 0, "cuda: {max_grid_blocks: 5, staged_row_groups: false}",
                        "cuda: {max_grid_blocks: 5}");
}

// Every short-row GEMV of a launch of at least 512 rows staged (staged_short_rows_from), as
// many rows a chunk as fit: the 0.5B's QKV (three parts: 896, 128 and 128 rows, four Q4_0 rows
// a unit, two Q8_0, no unit across parts), its O projection and its gate/up pairs, at Q4_0 and
// Q8_0 against the CPU; and at 4096 (only the gate/up pairs), and on a grid of five blocks.
TEST(CudaVsCpuArchs, StagedShortRowsAgree) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *type : {"q4_0", "q8_0"}) expect_backends_agree("0.5b", type, 16, 8, 0.2, 2, "qwen2", 0, "cpu", "cuda: {staged_short_rows_from: 512}");
  expect_backends_agree("0.5b", "q4_0", 16, 8, 0.2, 2, "qwen2", 0, "cpu", "cuda: {staged_short_rows_from: 4096}");
  expect_backends_agree("0.5b", "q4_0", 16, 8, 0.2, 2, "qwen2", 0, "cpu", "cuda: {staged_short_rows_from: 512, max_grid_blocks: 5}");
}

// Two blocks of 18 warps an SM for staged rows past the deep form's 28 an SM
// (staged_twin_blocks) move rows between warps, not what a row sums: the logits are the same
// bits. Two blocks of Qwen2-7B (its 4,608 QKV rows, three parts, on a 132-SM GPU) and of
// LLaMA-7B (its 4,096 O rows and 4,096 down rows of 11,008 values), at Q4_0.
TEST(CudaVsCpuArchs, StagedTwinBlocksLeaveLogitsAlone) {
  if (const std::string why = minfer::test::cuda_unavailable(); !why.empty()) GTEST_SKIP() << why;
  for (const char *arch : {"qwen2", "llama"})
    expect_backends_agree("7b", "q4_0", 4, 8, 0.0, 2, arch, 0, "cuda", "cuda: {staged_twin_blocks: true}");
}

// The CPU's kernels for prompts (the tiled int8 GEMM, int8_gemm.hpp) against its scalar row
// dots, on each SIMD isa this machine has: the same 8-bit activations, so the logits differ
// only by float summation order. 128 prompt tokens take the GEMM, the 16 single steps the row
// dots (the GEMM's units for the types with no row kernel of their own: Q4_1, Q5_1, Q2_K, Q3_K, IQ4).
TEST(CpuIsas, PromptKernelsAgreeWithScalar) {
  for (const char *isa : {"avx512vnni", "avxvnni", "avx2"}) {
    try {
      minfer::BackendSet b = minfer::open_backends(minfer::parse_run_config(std::string("backends: {cpu: {isa: ") + isa + "}}\n", "t.yaml"));
    } catch (const std::exception &e) {
      std::printf("isa %s skipped: %s\n", isa, e.what());
      continue;
    }
    // The SIMD and scalar kernels sum in other orders (and Q4_0's takes its offset off at the
    // end), which the random weights amplify to a few percent of the logits' RMS at the last
    // layer (0.04-0.07 seen), as between CPU and CUDA; a wrong tile or panel is off by ~100%.
    for (const char *type : {"q4_0", "q8_0", "q4_k_m", "q4_1", "q5_k", "q2_k", "q3_k", "iq4_nl", "iq4_xs"})
      expect_backends_agree("tiny", type, 128, 16, 0.1, 0, "qwen2", 0, "cpu: {isa: scalar}", std::string("cpu: {isa: ") + isa + "}");
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaVsCpu,
                         ::testing::Values("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k",
                                           "q5_k", "q6_k", "q4_k_m", "iq4_nl", "iq4_xs"));

}  // namespace
