// Op conformance: every op x dtype x shape on every loaded backend, against core/reference.
//
// Each tensor gets its own buffer with 256 guard bytes on both sides; outputs are poisoned
// before the run. After it, guards and inputs must be untouched and every output value must
// match the reference within the op's tolerance (docs/TESTING.md), with NaN/Inf agreement.
// Filter with MINFER_CONFORMANCE_OPS=add,get_rows (op names); backends with --gtest_filter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "graph/graph.hpp"
#include "minfer/decode.hpp"
#include "quant/reference.hpp"
#include "reference/ops.hpp"
#include "runtime/plugin.hpp"
#include "test_util.hpp"

namespace {

using minfer::Graph;
using minfer::GraphBuilder;
using minfer::TensorId;

constexpr uint64_t kGuard = 256;
constexpr uint8_t kPattern = 0xA5;

// ---- cases ------------------------------------------------------------------------------

struct Case {
  std::string label;
  std::function<Graph()> build;  // a one-node graph; inputs named in0, in1
  int32_t op;
  std::vector<int32_t> dtypes;   // input dtypes, for the coverage check
  minfer::StepShape step{};      // the step's shape (attention: its sequences)
  std::map<size_t, std::vector<int32_t>> fixed;  // inputs with given values (attention's indices)
};

enum class Fill { Normal, Specials, Ids, Blocks };

minfer::HostBytes no_bytes() { return {}; }

// A case's seed is its index in all_cases(): block types added later (IQ4_NL, IQ4_XS) have
// their cases appended last, so that every case before them keeps its data.
bool is_seeded_block_dtype(int32_t dt) { return dt != MINFER_DTYPE_IQ4_NL && dt != MINFER_DTYPE_IQ4_XS; }

std::vector<int32_t> seeded_block_dtypes() {
  std::vector<int32_t> r;
  for (int32_t dt : minfer::test::block_dtypes())
    if (is_seeded_block_dtype(dt)) r.push_back(dt);
  return r;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  auto shape_str = [](const std::vector<int64_t> &s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
  };
  const std::vector<std::vector<int64_t>> flat_shapes = {{1}, {7}, {33, 3}, {4096, 77}, {1000003}, {5, 3, 2, 2}};
  for (const auto &s : flat_shapes) {
    cases.push_back({"add f32" + shape_str(s), [s] {
      GraphBuilder g; auto a = g.input("in0", MINFER_DTYPE_F32, s), b = g.input("in1", MINFER_DTYPE_F32, s);
      g.mark_output(g.add("node", a, b)); return g.finish(); }, MINFER_OP_ADD, {MINFER_DTYPE_F32}});
    cases.push_back({"mul f32" + shape_str(s), [s] {
      GraphBuilder g; auto a = g.input("in0", MINFER_DTYPE_F32, s), b = g.input("in1", MINFER_DTYPE_F32, s);
      g.mark_output(g.mul("node", a, b)); return g.finish(); }, MINFER_OP_MUL, {MINFER_DTYPE_F32}});
    cases.push_back({"silu f32" + shape_str(s), [s] {
      GraphBuilder g; auto a = g.input("in0", MINFER_DTYPE_F32, s);
      g.mark_output(g.silu("node", a)); return g.finish(); }, MINFER_OP_SILU, {MINFER_DTYPE_F32}});
  }
  for (const auto &s : std::vector<std::vector<int64_t>>{{1}, {7}, {8}, {9}, {4099}, {1000003}, {896, 513}}) {
    cases.push_back({"convert f32->f16" + shape_str(s), [s] {
      GraphBuilder g; auto a = g.input("in0", MINFER_DTYPE_F32, s);
      g.mark_output(g.convert("node", a, MINFER_DTYPE_F16)); return g.finish(); }, MINFER_OP_CONVERT, {MINFER_DTYPE_F32}});
  }
  for (const auto &s : std::vector<std::vector<int64_t>>{{1, 1}, {5, 3}, {896, 129}, {4864, 7}, {3584, 2, 3}}) {
    cases.push_back({"add_row_broadcast f32" + shape_str(s), [s] {
      GraphBuilder g; auto a = g.input("in0", MINFER_DTYPE_F32, s), b = g.input("in1", MINFER_DTYPE_F32, {s[0]});
      g.mark_output(g.add_row_broadcast("node", a, b)); return g.finish(); }, MINFER_OP_ADD_ROW_BROADCAST, {MINFER_DTYPE_F32}});
  }
  // Gathers: small tables, and Qwen2's 151,936-row vocabulary (the largest realistic row count).
  struct Gather { int32_t dtype; int64_t d, rows, n_ids; };
  std::vector<Gather> gathers = {{MINFER_DTYPE_F32, 3, 5, 9}, {MINFER_DTYPE_F32, 64, 151936, 37},
                                 {MINFER_DTYPE_F16, 3, 5, 9}, {MINFER_DTYPE_F16, 64, 151936, 37},
                                 {MINFER_DTYPE_BF16, 3, 5, 9}, {MINFER_DTYPE_BF16, 64, 4096, 17}};
  const auto block_gathers = [](int32_t dt) {
    const int64_t per = minfer_dtype_info(dt).block_values;
    return std::vector<Gather>{{dt, per, 1, 3}, {dt, per * 3, 11, 20}, {dt, per * 4, 4096, 7}};
  };
  for (int32_t dt : seeded_block_dtypes())
    for (const Gather &ga : block_gathers(dt)) gathers.push_back(ga);
  for (int32_t dt : {MINFER_DTYPE_Q4_0, MINFER_DTYPE_Q8_0, MINFER_DTYPE_Q6_K, MINFER_DTYPE_Q4_K})
    gathers.push_back({dt, minfer_dtype_info(dt).block_values * 2, 151936, 33});
  const auto gather_case = [&cases](const Gather &ga) {
    cases.push_back({"get_rows " + std::string(minfer_dtype_name(ga.dtype)) + " table[" + std::to_string(ga.d) + "," +
                         std::to_string(ga.rows) + "] ids[" + std::to_string(ga.n_ids) + "]",
                     [ga] {
                       GraphBuilder g;
                       auto t = g.input("in0", ga.dtype, {ga.d, ga.rows});
                       auto ids = g.input("in1", MINFER_DTYPE_I32, {ga.n_ids});
                       g.mark_output(g.get_rows("node", t, ids));
                       return g.finish();
                     },
                     MINFER_OP_GET_ROWS, {ga.dtype}});
  };
  for (const Gather &ga : gathers) gather_case(ga);
  const auto dequantize_cases = [&cases, &shape_str](int32_t dt) {
    const int64_t per = minfer_dtype_info(dt).block_values;
    for (const auto &s : std::vector<std::vector<int64_t>>{{per}, {per * 3, 5}, {per * 16, 33}}) {
      cases.push_back({"dequantize " + std::string(minfer_dtype_name(dt)) + shape_str(s), [dt, s] {
        GraphBuilder g; auto a = g.input("in0", dt, s);
        g.mark_output(g.dequantize("node", a)); return g.finish(); }, MINFER_OP_DEQUANTIZE, {dt}});
    }
  };
  for (int32_t dt : seeded_block_dtypes()) dequantize_cases(dt);
  // Per-head norms (Qwen3's q and k): each run of `group` values of a row on its own (ABI 1.4).
  for (auto [rows, group, n] : std::vector<std::tuple<int64_t, int32_t, int64_t>>{{128, 32, 5}, {2048, 128, 3}, {64, 16, 1}}) {
    cases.push_back({"rms_norm f32 grouped " + std::to_string(group) + shape_str({rows, n}), [rows = rows, group = group, n = n] {
      GraphBuilder g; auto x = g.input("in0", MINFER_DTYPE_F32, {rows, n}), w = g.input("in1", MINFER_DTYPE_F32, {group});
      g.mark_output(g.rms_norm("node", x, w, 1e-6f, group)); return g.finish(); }, MINFER_OP_RMS_NORM, {MINFER_DTYPE_F32}});
  }
  for (const auto &s : std::vector<std::vector<int64_t>>{{1, 1}, {64, 5}, {896, 7}, {4864, 3}}) {
    cases.push_back({"rms_norm f32" + shape_str(s), [s] {
      GraphBuilder g; auto x = g.input("in0", MINFER_DTYPE_F32, s), w = g.input("in1", MINFER_DTYPE_F32, {s[0]});
      g.mark_output(g.rms_norm("node", x, w, 1e-5f)); return g.finish(); }, MINFER_OP_RMS_NORM, {MINFER_DTYPE_F32}});
    cases.push_back({"swiglu f32" + shape_str(s), [s] {
      GraphBuilder g; auto a = g.input("in0", MINFER_DTYPE_F32, s), b = g.input("in1", MINFER_DTYPE_F32, s);
      g.mark_output(g.swiglu("node", a, b)); return g.finish(); }, MINFER_OP_SWIGLU, {MINFER_DTYPE_F32}});
    cases.push_back({"geglu f32" + shape_str(s), [s] {
      GraphBuilder g; auto a = g.input("in0", MINFER_DTYPE_F32, s), b = g.input("in1", MINFER_DTYPE_F32, s);
      g.mark_output(g.geglu("node", a, b)); return g.finish(); }, MINFER_OP_GEGLU, {MINFER_DTYPE_F32}});
  }
  // Scale, plain (Gemma's sqrt(n_embd) on the embeddings) and soft-capped (its final logits).
  for (auto [sh, scale, cap] : std::vector<std::tuple<std::vector<int64_t>, float, float>>{
           {{1, 1}, 8.0f, 0.0f}, {{2304, 7}, 48.0f, 0.0f}, {{64, 5}, 1.0f, 2.0f}, {{256000, 3}, 1.0f, 30.0f}, {{999, 2}, 0.5f, 0.25f}}) {
    cases.push_back({"scale f32 x" + std::to_string(scale) + " cap " + std::to_string(cap) + shape_str(sh), [sh = sh, scale = scale, cap = cap] {
      GraphBuilder g; auto x = g.input("in0", MINFER_DTYPE_F32, sh);
      g.mark_output(g.scale("node", x, scale, cap)); return g.finish(); }, MINFER_OP_SCALE, {MINFER_DTYPE_F32}});
  }
  // Matmul: every weight type, one and several tokens, odd output counts.
  const auto matmul_case = [&cases](int32_t dt, int64_t k, int64_t m, int64_t n) {
    cases.push_back({"matmul " + std::string(minfer_dtype_name(dt)) + " w[" + std::to_string(k) + "," + std::to_string(m) + "] x" + std::to_string(n),
                     [dt, k, m, n] {
                       GraphBuilder g;
                       auto w = g.input("in0", dt, {k, m}), x = g.input("in1", MINFER_DTYPE_F32, {k, n});
                       g.mark_output(g.matmul("node", w, x));
                       return g.finish();
                     },
                     MINFER_OP_MATMUL, {dt}});
  };
  std::vector<int32_t> weight_types = {MINFER_DTYPE_F32, MINFER_DTYPE_F16, MINFER_DTYPE_BF16};
  for (int32_t dt : seeded_block_dtypes()) weight_types.push_back(dt);
  const auto matmul_cases = [&matmul_case](int32_t dt) {
    const int64_t per = minfer_dtype_info(dt).block_values, k_small = per == 1 ? 8 : per * 2;
    // 37 and 130 tokens: the many-token (prefill) paths, with sizes that need padding.
    std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {{k_small, 7, 1}, {k_small, 7, 5}, {per == 256 ? 1024 : 896, 33, 3}};
    // 10 and 37 tokens: the CPU's many-token (AMX) path from its threshold, with partial tiles.
    if (minfer_dtype_info(dt).is_quantized) shapes.push_back({per == 256 ? 512 : 896, 70, 37}), shapes.push_back({512, 40, 10});
    if (dt == MINFER_DTYPE_Q4_0 || dt == MINFER_DTYPE_Q6_K) shapes.push_back({1024, 130, 130});
    // One token over long rows (CUDA: the one-token GEMV past its short-row path): rows of whole
    // 16-byte pieces over two chunks, and rows that are not (33 or 9 blocks).
    if (minfer_dtype_info(dt).is_quantized) shapes.push_back({4096, 33, 1}), shapes.push_back({per == 256 ? 2304 : 1056, 33, 1});
    // Prefill over long rows with few output tiles (CUDA: MMQ splits k over blocks and sums the
    // partials), rows of whole 8-byte pieces and rows that are not.
    if (minfer_dtype_info(dt).is_quantized) shapes.push_back({4096, 70, 37}), shapes.push_back({per == 256 ? 2304 : 1056, 70, 37});
    // Batched decode steps (CUDA: the few-token tensor-core matmul): two token tiles over long
    // rows split over k with an odd row count, and one tile with a partial row block; eight
    // tiles (33-64 tokens), full and partial.
    if (minfer_dtype_info(dt).is_quantized) shapes.push_back({4096, 33, 20}), shapes.push_back({1024, 130, 6});
    if (minfer_dtype_info(dt).is_quantized) shapes.push_back({2048, 130, 64}), shapes.push_back({4096, 33, 48});
    // 2-4 tokens over long rows of whole 16-byte pieces (CUDA: the few-token dp4a GEMV), odd row counts.
    if (minfer_dtype_info(dt).is_quantized) shapes.push_back({2048, 33, 2}), shapes.push_back({2048, 70, 3}), shapes.push_back({4096, 48, 4});
    // Whole 16-row panels (the CPU holds Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants' matmul weights so): decode, a batch, a prompt.
    if (dt == MINFER_DTYPE_Q4_0 || dt == MINFER_DTYPE_Q8_0 || dt == MINFER_DTYPE_Q2_K || dt == MINFER_DTYPE_Q3_K || dt == MINFER_DTYPE_Q4_K ||
        dt == MINFER_DTYPE_Q5_K || dt == MINFER_DTYPE_Q6_K || dt == MINFER_DTYPE_IQ4_NL || dt == MINFER_DTYPE_IQ4_XS) {
      const int64_t kp = per == 256 ? 1024 : 896;
      shapes.push_back({kp, 64, 1}), shapes.push_back({kp, 48, 11}), shapes.push_back({1024, 128, 130});
    }
    for (auto [k, m, n] : shapes) matmul_case(dt, k, m, n);
  };
  for (int32_t dt : weight_types) matmul_cases(dt);
  for (int32_t mode : {MINFER_ROPE_NORMAL, MINFER_ROPE_NEOX})
    for (auto [hd, heads, dims, n] : std::vector<std::tuple<int, int, int, int64_t>>{{8, 8, 8, 5}, {64, 14, 64, 7}, {128, 4, 64, 3}}) {
      minfer_rope_params p{};
      p.mode = mode, p.head_dim = hd, p.n_dims = dims, p.theta_base = mode == MINFER_ROPE_NEOX ? 1e6f : 1e4f, p.freq_scale = 1.0f;
      cases.push_back({"rope " + std::string(mode ? "neox" : "normal") + " hd" + std::to_string(hd) + " x" + std::to_string(heads) + " dims" +
                           std::to_string(dims) + " n" + std::to_string(n),
                       [p, heads = heads, n = n] {
                         GraphBuilder g;
                         auto x = g.input("in0", MINFER_DTYPE_F32, {int64_t(p.head_dim) * heads, n});
                         auto pos = g.input("in1", MINFER_DTYPE_I32, {n});
                         g.mark_output(g.rope("node", x, pos, p));
                         return g.finish();
                       },
                       MINFER_OP_ROPE, {MINFER_DTYPE_F32}});
      // With frequency factors (Llama 3.1+'s rope_freqs, ABI 1.4).
      cases.push_back({"rope " + std::string(mode ? "neox" : "normal") + " factors hd" + std::to_string(hd) + " x" + std::to_string(heads) +
                           " dims" + std::to_string(dims) + " n" + std::to_string(n),
                       [p, heads = heads, n = n] {
                         GraphBuilder g;
                         auto x = g.input("in0", MINFER_DTYPE_F32, {int64_t(p.head_dim) * heads, n});
                         auto pos = g.input("in1", MINFER_DTYPE_I32, {n});
                         auto f = g.input("in2", MINFER_DTYPE_F32, {int64_t(p.n_dims / 2)});
                         g.mark_output(g.rope("node", x, pos, p, f));
                         return g.finish();
                       },
                       MINFER_OP_ROPE, {MINFER_DTYPE_F32}});
      // LongRoPE (ABI 1.6): factors and the rotated values scaled by an attention factor, the
      // dims past n_dims unscaled.
      minfer_rope_params pl = p;
      pl.attn_factor = 1.1902f;
      cases.push_back({"rope " + std::string(mode ? "neox" : "normal") + " factors attn_factor hd" + std::to_string(hd) + " x" +
                           std::to_string(heads) + " dims" + std::to_string(dims) + " n" + std::to_string(n),
                       [pl, heads = heads, n = n] {
                         GraphBuilder g;
                         auto x = g.input("in0", MINFER_DTYPE_F32, {int64_t(pl.head_dim) * heads, n});
                         auto pos = g.input("in1", MINFER_DTYPE_I32, {n});
                         auto f = g.input("in2", MINFER_DTYPE_F32, {int64_t(pl.n_dims / 2)});
                         g.mark_output(g.rope("node", x, pos, pl, f));
                         return g.finish();
                       },
                       MINFER_OP_ROPE, {MINFER_DTYPE_F32}});
    }
  // Argmax: rows of the specials (NaN never wins, +inf does), a vocabulary-long row set.
  for (const auto &sh : std::vector<std::vector<int64_t>>{{5, 3}, {33, 1}, {1000, 64}, {151936, 7}}) {
    cases.push_back({"argmax f32" + shape_str(sh), [sh] {
      GraphBuilder g; auto x = g.input("in0", MINFER_DTYPE_F32, sh);
      g.mark_output(g.argmax("node", x)); return g.finish(); }, MINFER_OP_ARGMAX, {MINFER_DTYPE_F32}});
  }
  // Mixture of experts (ABI 1.7). top_k over router-sized rows (values on a 0.5 grid, so ties
  // are common, and the specials: NaN never before a number); the chosen experts' weights;
  // the expert matmul over every weight type, one input per row and one per chosen expert;
  // the weighted sum.
  for (auto [n, rows, k] : std::vector<std::tuple<int64_t, int64_t, int32_t>>{{8, 3, 2}, {60, 7, 4}, {128, 1, 8}, {128, 130, 8}, {256, 5, 256}}) {
    cases.push_back({"top_k f32[" + std::to_string(n) + "," + std::to_string(rows) + "] k" + std::to_string(k), [n = n, rows = rows, k = k] {
      GraphBuilder g; auto x = g.input("in0", MINFER_DTYPE_F32, {n, rows});
      g.mark_output(g.top_k("node", x, k)); return g.finish(); }, MINFER_OP_TOP_K, {MINFER_DTYPE_F32}});
  }
  for (bool norm : {true, false})
    for (auto [ne, rows, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{8, 3, 2}, {128, 1, 8}, {128, 37, 8}, {60, 5, 4}}) {
      cases.push_back({"moe_weights " + std::string(norm ? "normalized" : "softmax") + " logits[" + std::to_string(ne) + "," + std::to_string(rows) +
                           "] k" + std::to_string(k),
                       [norm, ne = ne, rows = rows, k = k] {
                         GraphBuilder g;
                         auto l = g.input("in0", MINFER_DTYPE_F32, {ne, rows}), ids = g.input("in1", MINFER_DTYPE_I32, {k, rows});
                         g.mark_output(g.moe_weights("node", l, ids, norm, norm ? 1.0f : 2.5f));
                         return g.finish();
                       },
                       MINFER_OP_MOE_WEIGHTS, {MINFER_DTYPE_F32}});
    }
  const auto matmul_id_cases = [&cases](int32_t dt) {
    const int64_t per = minfer_dtype_info(dt).block_values, k_small = per == 1 ? 8 : per * 2;
    // (in, out, experts, chosen, rows, one input per chosen expert)
    std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool>> shapes = {
        {k_small, 7, 4, 2, 1, false}, {k_small, 7, 4, 2, 5, true}, {per == 256 ? 1024 : 896, 33, 16, 4, 1, false},
        {per == 256 ? 1024 : 896, 33, 16, 4, 37, false}, {per == 256 ? 512 : 384, 20, 8, 3, 19, true}};
    if (minfer_dtype_info(dt).is_quantized) shapes.push_back({2048, 24, 32, 8, 1, true});
    // Experts of whole 16-row panels (the CPU holds Q4_0, Q4_1, Q5_0, Q5_1 and K-quant ones so): a decode
    // token, a few per-choice inputs.
    shapes.push_back({per == 256 ? 1024 : 512, 32, 16, 4, 1, false}), shapes.push_back({per == 256 ? 512 : 256, 32, 8, 2, 3, true});
    // A prompt's worth of rows: ~50 per expert, past the CPU's AMX crossover and into CUDA's
    // grouped kernels.
    shapes.push_back({per == 256 ? 512 : 256, 48, 8, 2, 200, false});
    for (auto [kin, m, ne, kk, rows, per_pair] : shapes) {
      cases.push_back({"matmul_id " + std::string(minfer_dtype_name(dt)) + " w[" + std::to_string(kin) + "," + std::to_string(m) + "," +
                           std::to_string(ne) + "] x" + std::to_string(rows) + " k" + std::to_string(kk) + (per_pair ? " per-choice x" : ""),
                       [dt, kin = kin, m = m, ne = ne, kk = kk, rows = rows, per_pair = per_pair] {
                         GraphBuilder g;
                         auto w = g.input("in0", dt, {kin, m, ne});
                         auto x = per_pair ? g.input("in1", MINFER_DTYPE_F32, {kin, kk, rows}) : g.input("in1", MINFER_DTYPE_F32, {kin, rows});
                         auto ids = g.input("in2", MINFER_DTYPE_I32, {kk, rows});
                         g.mark_output(g.matmul_id("node", w, x, ids));
                         return g.finish();
                       },
                       MINFER_OP_MATMUL_ID, {dt}});
    }
  };
  for (int32_t dt : weight_types) matmul_id_cases(dt);
  for (auto [d, k, rows] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{7, 2, 1}, {2048, 8, 5}, {33, 4, 37}, {4096, 1, 3}}) {
    cases.push_back({"moe_sum f32[" + std::to_string(d) + "," + std::to_string(k) + "," + std::to_string(rows) + "]", [d = d, k = k, rows = rows] {
      GraphBuilder g; auto y = g.input("in0", MINFER_DTYPE_F32, {d, k, rows}), w = g.input("in1", MINFER_DTYPE_F32, {k, rows});
      g.mark_output(g.moe_sum("node", y, w)); return g.finish(); }, MINFER_OP_MOE_SUM, {MINFER_DTYPE_F32}});
  }
  // Attention over pages: each Seq is a slot with its page table row and the positions this
  // step brings (count tokens from `from`); pages are out of order and, where a case says so,
  // shared by two slots. The reference writes its copy of the caches; the backend's must end
  // up byte for byte the same (shared pages untouched).
  struct Seq { std::vector<int32_t> pages; int64_t from, count; };
  // window / softcap: Gemma's sliding-window layers and capped scores (ABI 1.6).
  auto paged = [&](const std::string &what, int32_t cache, int hd, int nh, int nkv, int32_t page_size, int64_t pool,
                   std::vector<Seq> seqs, int32_t window = 0, float softcap = 0, bool depth_said = true) {
    minfer_attention_params p{};
    p.head_dim = hd, p.n_head = nh, p.n_kv_head = nkv, p.scale = 1.0f / std::sqrt(float(hd)), p.page_size = page_size;
    p.window = window, p.softcap = softcap;
    int64_t width = 1, n = 0;
    for (const Seq &q : seqs) width = std::max<int64_t>(width, int64_t(q.pages.size())), n += q.count;
    std::vector<int32_t> pos, slot, table(size_t(width * int64_t(seqs.size())), 0);
    for (size_t si = 0; si < seqs.size(); ++si) {
      for (int64_t i = 0; i < seqs[si].count; ++i) pos.push_back(int32_t(seqs[si].from + i)), slot.push_back(int32_t(si));
      std::copy(seqs[si].pages.begin(), seqs[si].pages.end(), table.begin() + int64_t(si) * width);
    }
    Case c{"attention " + std::string(minfer_dtype_name(cache)) + " cache hd" + std::to_string(hd) + " heads " + std::to_string(nh) + "/" +
               std::to_string(nkv) + " pages of " + std::to_string(page_size) + ": " + what +
               (window ? ", window " + std::to_string(window) : "") + (softcap > 0 ? ", softcap " + std::to_string(softcap) : ""),
           [p, cache, n, pool, width, ns = int64_t(seqs.size())] {
             GraphBuilder g;
             const int64_t qd = int64_t(p.n_head) * p.head_dim, kvd = int64_t(p.n_kv_head) * p.head_dim;
             auto q = g.input("in0", MINFER_DTYPE_F32, {qd, n}, 1), k = g.input("in1", MINFER_DTYPE_F32, {kvd, n}, 1);
             auto v = g.input("in2", MINFER_DTYPE_F32, {kvd, n}, 1);
             auto kc = g.input("in3", cache, {kvd, pool * p.page_size}), vc = g.input("in4", cache, {kvd, pool * p.page_size});
             auto pos = g.input("in5", MINFER_DTYPE_I32, {n}, 0), slot = g.input("in6", MINFER_DTYPE_I32, {n}, 0);
             auto table = g.input("in7", MINFER_DTYPE_I32, {width, ns});
             g.mark_output(g.attention("node", q, k, v, kc, vc, pos, slot, table, p));
             return g.finish();
           },
           MINFER_OP_ATTENTION, {cache}};
    int64_t depth = 0;  // the step's max_positions, as the host says it (ABI 1.9)
    for (const Seq &q : seqs) depth = std::max(depth, q.from + q.count);
    c.step = {n, 0, n, int64_t(seqs.size()), depth_said ? depth : 0};
    c.fixed = {{5, pos}, {6, slot}, {7, table}};
    cases.push_back(std::move(c));
  };
  // Pages 0..count-1 in order (one sequence alone), or a fixed shuffle of [first, first + count).
  auto in_order = [](int64_t count) {
    std::vector<int32_t> r(static_cast<size_t>(count));
    for (size_t i = 0; i < r.size(); ++i) r[i] = int32_t(i);
    return r;
  };
  auto shuffled = [](int64_t first, int64_t count, uint32_t seed) {
    std::vector<int32_t> r(static_cast<size_t>(count));
    for (size_t i = 0; i < r.size(); ++i) r[i] = int32_t(first + int64_t(i));
    std::shuffle(r.begin(), r.end(), std::mt19937(seed));
    return r;
  };
  // One token of each of 8 sequences at positions 0 to 2500, each over its own shuffled pages
  // (the pages they use in all: the pool).
  auto eight_decodes = [&](uint32_t seed) {
    std::vector<Seq> seqs;
    int64_t used = 0;
    for (int64_t at : {0, 1, 15, 16, 300, 1000, 77, 2500}) {
      const int64_t pages = at / 16 + 1;
      seqs.push_back({shuffled(used, pages, uint32_t(seed + used)), at, 1});
      used += pages;
    }
    return std::make_pair(seqs, used);
  };
  for (int32_t cache : {MINFER_DTYPE_F32, MINFER_DTYPE_F16}) {
    // One sequence over pages in order: prefill chunks and decode steps after `past` positions.
    for (auto [hd, nh, nkv, n, ctx, past] : std::vector<std::tuple<int, int, int, int64_t, int64_t, int64_t>>{
             {8, 8, 4, 5, 16, 0}, {8, 8, 4, 1, 64, 37}, {64, 14, 2, 7, 32, 3}, {128, 4, 4, 3, 512, 300},
             {12, 6, 2, 4, 16, 2},  // hd 12: the vector loops' tails
             // Fused CUDA kernels: several row tiles of a 7-query-head group, a decode split
             // over a long cache, hd 128 with GQA 7.
             {64, 14, 2, 100, 256, 20}, {64, 14, 2, 1, 2048, 1500}, {128, 28, 4, 37, 608, 200},
             // One-token decode kernel: one chunk, and chunks merged by the last block.
             {128, 28, 4, 1, 608, 300}, {128, 28, 4, 1, 4096, 3000}, {64, 16, 2, 1, 1024, 0},
             // Heads of 256 (Gemma): prefill chunks, one-token decode short and split over chunks.
             {256, 8, 4, 37, 608, 200}, {256, 8, 4, 1, 608, 300}, {256, 8, 1, 1, 4096, 3000}}) {
      const int64_t pages = ctx / 16;
      paged("one sequence, n" + std::to_string(n) + " past " + std::to_string(past), cache, hd, nh, nkv, 16, pages,
            {{in_order(pages), past, n}});
    }
    // Pages scattered out of order, and a page size of 64 (a key tile spans pages of 16, not of 64).
    paged("scattered, n7 past 40", cache, 64, 14, 2, 16, 8, {{shuffled(0, 8, 1), 40, 7}});
    paged("scattered pages of 64, n70 past 100", cache, 128, 28, 4, 64, 6, {{shuffled(0, 6, 2), 100, 70}});
    // Sequences of different lengths in one step: prefill chunks mixed with decode tokens.
    for (auto [hd, nh, nkv] : std::vector<std::tuple<int, int, int>>{{64, 14, 2}, {128, 28, 4}, {8, 8, 4}, {12, 6, 2}})
      paged("4 sequences, chunks and decode tokens", cache, hd, nh, nkv, 16, 40,
            {{shuffled(0, 8, 3), 0, 5}, {shuffled(8, 8, 4), 100, 1}, {shuffled(16, 8, 5), 33, 20}, {shuffled(24, 8, 6), 7, 1}});
    // Decode steps: one token of each sequence (the CUDA one-token kernel for many sequences),
    // short and long ones, and a long one split over chunks.
    for (auto [hd, nh, nkv] : std::vector<std::tuple<int, int, int>>{{128, 28, 4}, {64, 16, 2}, {64, 14, 2}, {256, 8, 4}}) {
      const auto [seqs, used] = eight_decodes(7);
      paged("decode of 8 sequences", cache, hd, nh, nkv, 16, used, seqs);
    }
    // A page shared by two sequences (a common prefix of 32 positions): both read it, neither
    // writes it.
    {
      const std::vector<int32_t> prefix = {5, 2};
      std::vector<int32_t> a = prefix, b = prefix;
      for (int32_t x : {0, 7, 3}) a.push_back(x);
      for (int32_t x : {1, 6, 4}) b.push_back(x);
      paged("a shared prefix page, decode and chunk", cache, 64, 14, 2, 16, 8, {{a, 40, 1}, {b, 32, 4}});
    }
    // Sliding windows and capped scores (Gemma 2/3), on every kernel's head dims: a prefill
    // chunk longer than the window (the window's edge inside a key tile), decode past it (the
    // split decode over a long cache skips whole chunks), mixed sequences, and a window wider
    // than the sequence (no effect). 256: Gemma's real head size.
    for (auto [hd, nh, nkv] : std::vector<std::tuple<int, int, int>>{{32, 4, 2}, {64, 14, 2}, {128, 28, 4}, {256, 8, 4}}) {
      paged("prefill n100", cache, hd, nh, nkv, 16, 8, {{shuffled(0, 8, 9), 0, 100}}, 37);
      paged("prefill n70 past 30", cache, hd, nh, nkv, 16, 8, {{shuffled(0, 8, 10), 30, 70}}, 16, 50.0f);
      paged("decode past 3000", cache, hd, nh, nkv, 16, 200, {{shuffled(0, 200, 11), 3000, 1}}, 1024);
      paged("4 sequences, chunks and decode tokens", cache, hd, nh, nkv, 16, 40,
            {{shuffled(0, 8, 3), 0, 5}, {shuffled(8, 8, 4), 100, 1}, {shuffled(16, 8, 5), 33, 20}, {shuffled(24, 8, 6), 7, 1}}, 8, 0.5f);
      paged("capped scores, decode of 3", cache, hd, nh, nkv, 16, 24, {{shuffled(0, 8, 12), 100, 1}, {shuffled(8, 8, 13), 20, 1}, {shuffled(16, 8, 14), 64, 1}}, 0, 5.0f);
      paged("window wider than the sequence", cache, hd, nh, nkv, 16, 4, {{in_order(4), 10, 6}}, 4096);
    }
  }
  // Prompts of the types CUDA takes on f16 tensor cores with the weights dequantized in
  // registers (128 x 128 tiles): k split over blocks, a partial row tile and token tile; odd
  // Q6_K blocks. Appended last (Q4_0 and Q8_0 after the K types): the cases before keep their seeds.
  for (int32_t dt : {MINFER_DTYPE_Q4_K, MINFER_DTYPE_Q5_K, MINFER_DTYPE_Q6_K, MINFER_DTYPE_Q4_0, MINFER_DTYPE_Q8_0})
    for (auto [k, m, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4096, 130, 130}, {1536, 200, 300}}) matmul_case(dt, k, m, n);
  // The step's max_positions (ABI 1.9): a short sequence in a long cache told and not told
  // (CUDA's one-token kernel plans by it: a query head a block over one chunk, or the cache's
  // capacity split with the chunks past the token left at once), and a long one not told.
  for (int32_t cache : {MINFER_DTYPE_F32, MINFER_DTYPE_F16}) {
    paged("one sequence, n1 past 100 of 8192", cache, 128, 28, 4, 16, 512, {{in_order(512), 100, 1}});
    paged("one sequence, n1 past 100 of 8192, depth not said", cache, 128, 28, 4, 16, 512, {{in_order(512), 100, 1}}, 0, 0, false);
    paged("one sequence, n1 past 3000, depth not said", cache, 128, 28, 4, 16, 256, {{in_order(256), 3000, 1}}, 0, 0, false);
  }
  // One token over rows longer than 8192 values (CUDA: the one-token GEMV's sixteen-warp
  // blocks, a 7B's ffn_down), for every block type.
  for (int32_t dt : seeded_block_dtypes()) matmul_case(dt, 9216, 37, 1);
  // One token of each of several sequences, or of one long one, with a sliding window and
  // capped scores: CUDA's one-token kernel in its group form (a KV head's query heads a block;
  // on tensor cores for f16 caches), the long one split over chunks the window partly skips.
  for (int32_t cache : {MINFER_DTYPE_F32, MINFER_DTYPE_F16})
    for (auto [hd, nh, nkv] : std::vector<std::tuple<int, int, int>>{{128, 28, 4}, {64, 16, 2}}) {
      const auto [seqs, used] = eight_decodes(17);
      paged("decode of 8 sequences", cache, hd, nh, nkv, 16, used, seqs, 700, 30.0f);
      paged("one sequence, n1 past 6000", cache, hd, nh, nkv, 16, 400, {{shuffled(0, 400, 15), 6000, 1}}, 2000);
    }
  // Q4_1's, Q5_0's and Q5_1's whole panels (as Q4_0's above; appended last: the cases before keep their seeds).
  for (int32_t dt : {MINFER_DTYPE_Q5_0, MINFER_DTYPE_Q5_1, MINFER_DTYPE_Q4_1})
    for (auto [k, m, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{896, 64, 1}, {896, 48, 11}, {1024, 128, 130}}) matmul_case(dt, k, m, n);
  // One token of one sequence over one KV head (Gemma 3's MQA): the CPU splits its keys over
  // the threads and merges the shares; with a sliding window most shares hold none of its keys.
  for (int32_t cache : {MINFER_DTYPE_F32, MINFER_DTYPE_F16}) {
    paged("MQA decode past 5000", cache, 256, 4, 1, 16, 320, {{shuffled(0, 320, 16), 5000, 1}});
    paged("MQA decode past 5000, window 700", cache, 128, 8, 1, 16, 320, {{shuffled(0, 320, 17), 5000, 1}}, 700, 30.0f);
  }
  // One token over more rows of more than 8192 values than sixteen warps an SM take one at a
  // time on a 132-SM GPU (CUDA: the one-token GEMV's 28-warp blocks, a warp a row; a 7B's
  // ffn_down), for every seeded block type.
  for (int32_t dt : seeded_block_dtypes()) matmul_case(dt, 9216, 2240, 1);
  // The same form for rows of at most 8192 values, more than three blocks of eight warps an
  // SM take one at a time (a 7B's O projection).
  for (int32_t dt : seeded_block_dtypes()) matmul_case(dt, 3584, 3400, 1);
  // Block types added after the cases above were seeded: each type's every case, here.
  for (int32_t dt : minfer::test::block_dtypes()) {
    if (is_seeded_block_dtype(dt)) continue;
    for (const Gather &ga : block_gathers(dt)) gather_case(ga);
    dequantize_cases(dt);
    matmul_cases(dt);
    matmul_id_cases(dt);
    matmul_case(dt, 9216, 37, 1);
  }
  return cases;
}

// ---- data -------------------------------------------------------------------------------

// f32 values with the specials every backend must treat alike, then N(0, 1) (or wider).
std::vector<uint8_t> f32_data(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto &x : v) x = dist(rng);
  if (specials) {
    const float sp[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e30f, -1e30f, 1e-40f, -88.0f, 88.0f,
                        65504.0f, 65520.0f, 65519.0f, 1.00048828125f /* f16 tie */, 2.98023224e-8f, 1e-8f};
    for (size_t i = 0; i < std::size(sp) && i < v.size(); ++i) v[(i * 7919) % v.size()] = sp[i];
  }
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> input_data(const minfer::Tensor &t, int32_t op, int input, int64_t table_rows, uint32_t seed) {
  if (t.dtype == MINFER_DTYPE_I32) {  // row ids: first and last row always, the rest random
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(size_t(t.n_elements()));
    for (size_t i = 0; i < ids.size(); ++i)
      ids[i] = i == 0 ? 0 : i == 1 ? int32_t(table_rows - 1) : int32_t(rng() % uint32_t(table_rows));
    std::vector<uint8_t> out(ids.size() * 4);
    std::memcpy(out.data(), ids.data(), out.size());
    return out;
  }
  if (op == MINFER_OP_TOP_K) {  // on a 0.5 grid (ties), with the specials
    std::vector<uint8_t> b = f32_data(t.n_elements(), seed, true);
    for (size_t i = 0; i < b.size(); i += 4) {
      float x;
      std::memcpy(&x, &b[i], 4);
      if (std::isfinite(x) && std::fabs(x) < 1e6f) x = std::round(x * 2.0f) / 2.0f;
      std::memcpy(&b[i], &x, 4);
    }
    return b;
  }
  if (op == MINFER_OP_ROPE && input == 2) {  // frequency factors: 1 to 8, as Llama 3.1's range
    std::mt19937 rng(seed);
    std::vector<float> v(size_t(t.n_elements()));
    for (float &x : v) x = 1.0f + 7.0f * float(rng() % 1000) / 1000.0f;
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  const bool elementwise = op == MINFER_OP_ADD || op == MINFER_OP_MUL || op == MINFER_OP_SILU || op == MINFER_OP_CONVERT ||
                           op == MINFER_OP_ADD_ROW_BROADCAST || op == MINFER_OP_SWIGLU || op == MINFER_OP_ARGMAX ||
                           op == MINFER_OP_GEGLU || op == MINFER_OP_SCALE;
  if (t.dtype == MINFER_DTYPE_F32) return f32_data(t.n_elements(), seed, elementwise && input == 0);
  if (t.dtype == MINFER_DTYPE_F16 || t.dtype == MINFER_DTYPE_BF16) {
    std::vector<uint8_t> f = f32_data(t.n_elements(), seed, false), out(size_t(t.n_elements()) * 2);
    for (int64_t i = 0; i < t.n_elements(); ++i) {
      float x;
      std::memcpy(&x, &f[size_t(i) * 4], 4);
      uint32_t bits;
      std::memcpy(&bits, &x, 4);
      const uint16_t h = t.dtype == MINFER_DTYPE_F16 ? minfer::quant::f32_to_f16(x) : uint16_t(bits >> 16);
      std::memcpy(&out[size_t(i) * 2], &h, 2);
    }
    return out;
  }
  const int64_t blocks = t.n_elements() / minfer_dtype_info(t.dtype).block_values;
  return minfer::test::random_blocks(t.dtype, blocks, seed);
}

// ---- comparison -------------------------------------------------------------------------

float value_at(const std::vector<uint8_t> &bytes, int32_t dtype, int64_t i) {
  if (dtype == MINFER_DTYPE_F16) {
    uint16_t h;
    std::memcpy(&h, &bytes[size_t(i) * 2], 2);
    return minfer::quant::f16_to_f32(h);
  }
  float f;
  std::memcpy(&f, &bytes[size_t(i) * 4], 4);
  return f;
}

// The allowed |got - want| for one value; documented in docs/TESTING.md. rms: the root mean
// square of the whole reference output (sums of many terms are judged against their size).
double tolerance(int32_t op, int32_t in_dtype, float want, double rms) {
  const double a = std::fabs(double(want));
  switch (op) {
    case MINFER_OP_SWIGLU: return 2e-6 * a + 1e-37;
    // exp of the cubic's argument: its relative error grows with |x| (~3e-6 at |x| = 8).
    case MINFER_OP_GEGLU: return 1e-5 * a + 1e-37;
    case MINFER_OP_SCALE: return 1e-6 * a + 1e-37;  // tanh differs by a few ulp between libms
    case MINFER_OP_RMS_NORM: return 1e-5 * a + 1e-6 * rms;
    case MINFER_OP_ROPE: return 1e-5 * a + 1e-5 * rms;
    // Block-type weights: backends may quantize activations to 8 bits for integer dot products
    // (as llama.cpp does), an error of about 1% of the output's size and up to 3.4% at single
    // outputs of these random blocks (K-quant scales spread widely); a misread layout is ~100%.
    case MINFER_OP_MATMUL:
    case MINFER_OP_MATMUL_ID: return minfer_dtype_info(in_dtype).is_quantized ? 5e-2 * rms : 1e-5 * a + 2e-5 * rms;
    case MINFER_OP_MOE_WEIGHTS: return 1e-5 * a + 1e-9;  // exp differs by a few ulp between libms
    case MINFER_OP_MOE_SUM: return 1e-6 * a + 1e-6 * rms;  // k products summed, FMA or not
    // An f16 cache: backends may also round Q and the softmax weights to f16 for tensor-core
    // products (llama.cpp's CUDA flash attention does), ~1e-3 of the output's size; an f32
    // cache keeps f32 arithmetic.
    case MINFER_OP_ATTENTION: return in_dtype == MINFER_DTYPE_F16 ? 1e-5 * a + 4e-3 * rms : 1e-5 * a + 1e-5 * rms;
    case MINFER_OP_SILU: return 2e-6 * a + 1e-37;  // exp differs by a few ulp between libms
    case MINFER_OP_GET_ROWS:
      return minfer_dtype_info(in_dtype).is_quantized ? 1e-6 * a + 1e-9 : 0.0;  // FMA contraction
    case MINFER_OP_DEQUANTIZE: return a * (1.0 / 1024) + 6e-8;  // one f16 step
    default: return 0.0;  // add, mul, bias add, convert: IEEE-exact everywhere
  }
}

// "" when got matches want; else the first bad value.
std::string compare(const std::vector<uint8_t> &got, const std::vector<uint8_t> &want, int32_t out_dtype,
                    int32_t op, int32_t in_dtype, int64_t n) {
  if (out_dtype == MINFER_DTYPE_I32) {  // indices (argmax): exact
    for (int64_t i = 0; i < n; ++i) {
      int32_t g, w;
      std::memcpy(&g, &got[size_t(i) * 4], 4);
      std::memcpy(&w, &want[size_t(i) * 4], 4);
      if (g != w) return "index " + std::to_string(i) + " of " + std::to_string(n) + ": got " + std::to_string(g) + ", reference " + std::to_string(w);
    }
    return "";
  }
  double ss = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double w = value_at(want, out_dtype, i);
    if (std::isfinite(w)) ss += w * w, ++finite;
  }
  const double rms = finite ? std::sqrt(ss / double(finite)) : 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float g = value_at(got, out_dtype, i), w = value_at(want, out_dtype, i);
    const bool ok = std::isnan(w) ? std::isnan(g)
                    : std::isinf(w) ? g == w
                                    : (std::isfinite(g) && std::fabs(double(g) - double(w)) <= tolerance(op, in_dtype, w, rms));
    if (!ok) {
      std::ostringstream s;
      s << "value " << i << " of " << n << ": got " << g << ", reference " << w
        << " (allowed difference " << tolerance(op, in_dtype, w, rms) << ")";
      return s.str();
    }
  }
  return "";
}

// ---- the runner -------------------------------------------------------------------------

struct Target {
  std::string label, backend, plugin_path;
  std::vector<std::pair<std::string, std::string>> options;
  std::set<int32_t> required;  // ops the backend must run in every case; empty = all ops
};



// gtest prints parameters in test listings: show the label, not the struct's bytes.
void PrintTo(const Target &t, std::ostream *os) { *os << t.label; }

std::vector<Target> targets() {
  std::vector<Target> t = {{"cpu", "cpu", "", {}, {}},
                           // The narrower instruction sets' kernels, forced on this CPU.
                           {"cpu_vnni", "cpu", "", {{"isa", "avx512vnni"}}, {}},
                           {"cpu_avxvnni", "cpu", "", {{"isa", "avxvnni"}}, {}},
                           {"cpu_avx2", "cpu", "", {{"isa", "avx2"}}, {}},
                           {"cpu_scalar", "cpu", "", {{"isa", "scalar"}}, {}},
                           {"cuda", "cuda", "", {}, {}},
                           // 3 blocks per grid: every kernel must cover its range by grid-stride.
                           {"cuda_clamped_grid", "cuda", "", {{"max_grid_blocks", "3"}}, {}},
                           // The prompt matmuls on Hopper's warpgroup MMA (mma.sync elsewhere).
                           {"cuda_wgmma", "cuda", "", {{"mmq_wgmma", "true"}}, {}},
                           // The example plugin (ctest builds it from the installed SDK): runs
                           // add/mul, and must say "unsupported" for the rest, never crash.
                           {"template", "template", "", {}, {MINFER_OP_ADD, MINFER_OP_MUL, MINFER_OP_ATTENTION}}};
  return t;
}

bool op_selected(int32_t op) {
  const char *env = std::getenv("MINFER_CONFORMANCE_OPS");
  if (!env || !*env) return true;
  std::stringstream ss(env);
  for (std::string item; std::getline(ss, item, ',');)
    if (item == minfer_op_name(op)) return true;
  return false;
}

class Conformance : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    const Target &t = GetParam();
    std::string path = t.plugin_path;
    if (t.backend == "template") {
      const char *env = std::getenv("MINFER_TEMPLATE_PLUGIN");
      if (!env || !std::filesystem::exists(env))
        GTEST_SKIP() << "MINFER_TEMPLATE_PLUGIN does not name a built example plugin (ctest sets it)";
      path = env;
    }
    try {
      plugin_ = minfer::find_plugin(t.backend, path, minfer::plugin_search_dirs(""));
    } catch (const minfer::Error &e) {
      GTEST_SKIP() << "backend '" << t.backend << "' is not built here: " << e.what();
    }
    std::string why;
    if (plugin_->device_count(&why) == 0) GTEST_SKIP() << "backend '" << t.backend << "' has no device: " << why;
    try {
      backend_ = std::make_unique<minfer::BackendHandle>(plugin_, 0, t.options);
    } catch (const minfer::Error &e) {
      if (std::string(e.what()).find("this CPU has no") != std::string::npos) GTEST_SKIP() << e.what();
      throw;
    }
  }

  // A tensor in its own guarded buffer.
  struct Placed {
    std::unique_ptr<minfer::DeviceBuffer> buf;
    std::vector<uint8_t> image;  // the whole buffer as written
  };

  Placed place(uint64_t bytes, const std::vector<uint8_t> *data) {
    Placed p;
    p.image.assign(bytes + 2 * kGuard, kPattern);
    if (data) std::memcpy(p.image.data() + kGuard, data->data(), data->size());
    p.buf = backend_->alloc(p.image.size());
    p.buf->write(0, p.image.data(), p.image.size());
    return p;
  }

  // Runs one case; returns "" on success, "unsupported: ..." or the failure. rewrite: after
  // compile and a first run, input 0 gets new values (a backend that keeps weights in its own
  // layout must take them), and the case's result is the second run's.
  std::string run_case(const Case &c, uint32_t seed, bool rewrite = false) {
    const Graph g = c.build();
    const minfer::Node &node = g.nodes().at(0);
    minfer::AbiNode desc(g, node);
    const minfer::SupportAnswer s = backend_->supports(desc.node());
    if (!s.yes) return "unsupported: " + s.why;

    std::vector<std::vector<uint8_t>> data;
    std::vector<minfer::reference::RefTensor> ref_in;
    // The range of the i32 input's values: positions, expert ids, or the table's rows.
    const int64_t table_rows = c.op == MINFER_OP_ROPE          ? 32768
                               : c.op == MINFER_OP_MOE_WEIGHTS ? g.tensor(node.inputs[0]).shape[0]
                               : c.op == MINFER_OP_MATMUL_ID   ? g.tensor(node.inputs[0]).shape[2]
                                                               : g.tensor(node.inputs[0]).shape[1];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (auto f = c.fixed.find(i); f != c.fixed.end()) {
        data.emplace_back(f->second.size() * 4);
        std::memcpy(data.back().data(), f->second.data(), data.back().size());
        continue;
      }
      data.push_back(input_data(g.tensor(node.inputs[i]), c.op, int(i), table_rows, seed + uint32_t(i)));
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const auto &t = g.tensor(node.inputs[i]);
      ref_in.push_back({t.dtype, t.shape, data[i].data()});
    }
    const minfer::Tensor &out = g.tensor(node.output);
    // The reference works on copies: attention writes its caches, and the backend must write
    // the same bytes into its own.
    std::vector<std::vector<uint8_t>> ref_data = data;
    for (size_t i = 0; i < ref_in.size(); ++i) ref_in[i].data = ref_data[i].data();
    std::vector<uint8_t> want = minfer::reference::run_op(c.op, ref_in, out.dtype, out.shape,
                                                          node.params.empty() ? nullptr : node.params.data());

    std::vector<Placed> ins;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      ins.push_back(place(data[i].size(), &data[i]));
      desc.input(i).buffer = ins.back().buf->raw();
      desc.input(i).offset = kGuard;
    }
    Placed o = place(out.n_bytes(), nullptr);
    desc.output().buffer = o.buf->raw();
    desc.output().offset = kGuard;

    auto seg = backend_->compile({&desc.node()});
    backend_->execute(*seg, 0, c.step);
    backend_->synchronize();
    if (rewrite) {
      data[0] = input_data(g.tensor(node.inputs[0]), c.op, 0, table_rows, seed + 1000u);
      ref_data = data;
      for (size_t i = 0; i < ref_in.size(); ++i) ref_in[i].data = ref_data[i].data();
      want = minfer::reference::run_op(c.op, ref_in, out.dtype, out.shape, node.params.empty() ? nullptr : node.params.data());
      std::memcpy(ins[0].image.data() + kGuard, data[0].data(), data[0].size());
      ins[0].buf->write(kGuard, data[0].data(), data[0].size());
      backend_->execute(*seg, 1, c.step);
      backend_->synchronize();
    }

    std::vector<uint8_t> got_all(o.image.size());
    o.buf->read(0, got_all.data(), got_all.size());
    for (uint64_t i = 0; i < kGuard; ++i)
      if (got_all[i] != kPattern || got_all[got_all.size() - 1 - i] != kPattern)
        return "wrote outside its output: guard byte " + std::to_string(i) + " changed";
    for (size_t i = 0; i < ins.size(); ++i) {
      std::vector<uint8_t> now(ins[i].image.size());
      ins[i].buf->read(0, now.data(), now.size());
      std::vector<uint8_t> expect = ins[i].image;  // inputs stay as written, but for attention's caches
      std::copy(ref_data[i].begin(), ref_data[i].end(), expect.begin() + kGuard);
      if (now != expect) return "input " + std::to_string(i) + " or its guard bytes differ from what the op may leave there";
    }
    const std::vector<uint8_t> got(got_all.begin() + kGuard, got_all.end() - kGuard);
    return compare(got, want, out.dtype, c.op, c.dtypes.at(0), out.n_elements());
  }

  std::shared_ptr<minfer::Plugin> plugin_;
  std::unique_ptr<minfer::BackendHandle> backend_;
};

TEST_P(Conformance, EveryOpDtypeShape) {
  const Target &t = GetParam();
  int passed = 0, failed = 0, unsupported = 0, seed = 1;
  for (const Case &c : all_cases()) {
    if (!op_selected(c.op)) continue;
    std::string r;
    try {
      r = run_case(c, uint32_t(seed++) * 7919u);
    } catch (const std::exception &e) {
      r = std::string("error: ") + e.what();
    }
    if (r.rfind("unsupported: ", 0) == 0) {
      ++unsupported;
      if (t.required.empty() || t.required.count(c.op)) ADD_FAILURE() << t.label << ": " << c.label << ": " << r;
    } else if (!r.empty()) {
      ++failed;
      ADD_FAILURE() << t.label << ": " << c.label << ": " << r;
    } else {
      ++passed;
    }
  }
  std::printf("conformance[%s]: %d passed, %d failed, %d not supported by this backend\n", t.label.c_str(),
              passed, failed, unsupported);
  EXPECT_GT(passed, 0) << "no case ran on " << t.label;
}

// Weights written after compile and after a run: the matmul uses the new ones, and reading
// them back gives what was written (the CPU repacks Q4_0, Q4_1, Q5_0, Q5_1 and K-quant weights in place at compile).
TEST_P(Conformance, MatmulWeightsRewrittenAfterCompile) {
  const Target &t = GetParam();
  if (!op_selected(MINFER_OP_MATMUL)) GTEST_SKIP() << "filtered out";
  int ran = 0, seed = 5;
  for (const Case &c : all_cases()) {
    const int32_t dt = c.dtypes[0];
    const bool panels = dt == MINFER_DTYPE_Q4_0 || dt == MINFER_DTYPE_Q4_1 || dt == MINFER_DTYPE_Q5_0 || dt == MINFER_DTYPE_Q5_1 || dt == MINFER_DTYPE_Q2_K || dt == MINFER_DTYPE_Q3_K || dt == MINFER_DTYPE_Q4_K ||
                        dt == MINFER_DTYPE_Q5_K || dt == MINFER_DTYPE_Q6_K || dt == MINFER_DTYPE_IQ4_NL || dt == MINFER_DTYPE_IQ4_XS;
    if (c.op != MINFER_OP_MATMUL || (!panels && dt != MINFER_DTYPE_F16 && dt != MINFER_DTYPE_F32)) continue;
    std::string r;
    try {
      r = run_case(c, uint32_t(seed++) * 104729u, true);
    } catch (const std::exception &e) {
      r = std::string("error: ") + e.what();
    }
    if (r.rfind("unsupported: ", 0) == 0) continue;
    EXPECT_EQ(r, "") << t.label << ": " << c.label;
    ++ran;
  }
  if (ran == 0 && t.label.rfind("cpu", 0) != 0) GTEST_SKIP() << t.label << " runs no q4_0, f16 or f32 matmul case";
  EXPECT_GT(ran, 0) << "no q4_0, f16 or f32 matmul ran on " << t.label;
}

// An expert id outside the experts is an error naming the id, never a read outside the
// weights: a decode token (CUDA reads its ids in the matmul kernel) and several rows (CUDA
// groups them by a route kernel first), on the int8 path and the generic one.
TEST_P(Conformance, MatmulIdRejectsBadExpertIds) {
  const Target &t = GetParam();
  if (!op_selected(MINFER_OP_MATMUL_ID)) GTEST_SKIP() << "filtered out";
  int ran = 0;
  for (int32_t dt : {MINFER_DTYPE_Q4_0, MINFER_DTYPE_F32})
    for (int64_t rows : {1, 3}) {
      Case c{"matmul_id bad id", [dt, rows] {
               GraphBuilder g;
               auto w = g.input("in0", dt, {64, 8, 4});
               auto x = g.input("in1", MINFER_DTYPE_F32, {64, rows});
               auto ids = g.input("in2", MINFER_DTYPE_I32, {2, rows});
               g.mark_output(g.matmul_id("node", w, x, ids));
               return g.finish();
             },
             MINFER_OP_MATMUL_ID, {dt}};
      std::vector<int32_t> ids(size_t(2 * rows), 1);
      ids[1] = 9;  // the first row's second choice: past the 4 experts
      c.fixed = {{2, ids}};
      std::string r;
      try {
        r = run_case(c, 77);
      } catch (const std::exception &e) {
        r = std::string("error: ") + e.what();
      }
      if (r.rfind("unsupported: ", 0) == 0) continue;
      ++ran;
      EXPECT_NE(r.find("error: "), std::string::npos) << t.label << " " << minfer_dtype_name(dt) << " rows " << rows << ": " << r;
      EXPECT_NE(r.find("9"), std::string::npos) << r;
    }
  if (ran == 0 && t.label.rfind("cpu", 0) != 0) GTEST_SKIP() << t.label << " runs no matmul_id";
  EXPECT_GT(ran, 0) << "no matmul_id ran on " << t.label;
}

// 64-bit indexing: a tensor of more than 2^31 values (a 7B model's largest matrices have
// ~5e8 values per tensor; stacked experts and long vocabularies go past 2^31).
TEST_P(Conformance, DequantizeAbove2To31Values) {
  const Target &t = GetParam();
  if (t.label != "cuda") GTEST_SKIP() << "the >2^31-value case runs on the GPU backend with its default grid (5.5 GB)";
  if (!op_selected(MINFER_OP_DEQUANTIZE)) GTEST_SKIP() << "filtered out";
  const int64_t n_blocks = (int64_t(1) << 31) / 32 + 4096, n = n_blocks * 32;
  // Tile 1M random blocks: distinct enough, and quick to make.
  const int64_t tile = 1 << 20;
  const std::vector<uint8_t> pattern = minfer::test::random_blocks(MINFER_DTYPE_Q4_0, tile, 99);
  auto in = backend_->alloc(uint64_t(n_blocks) * 18);
  for (int64_t b = 0; b < n_blocks; b += tile) {
    const int64_t cnt = std::min(tile, n_blocks - b);
    in->write(uint64_t(b) * 18, pattern.data(), uint64_t(cnt) * 18);
  }
  auto out = backend_->alloc(uint64_t(n) * 2);
  minfer_tensor x{}, y{};
  x.struct_size = y.struct_size = sizeof(minfer_tensor);
  x.dtype = MINFER_DTYPE_Q4_0;
  y.dtype = MINFER_DTYPE_F16;
  x.rank = y.rank = 1;
  x.shape[0] = y.shape[0] = n;
  for (int d = 1; d < 4; ++d) x.shape[d] = y.shape[d] = 1, x.stride_bytes[d] = n_blocks * 18, y.stride_bytes[d] = n * 2;
  y.stride_bytes[0] = 2;
  x.buffer = in->raw();
  y.buffer = out->raw();
  x.name = "big_q4_0";
  y.name = "big_f16";
  x.token_dim = y.token_dim = -1;
  const minfer_tensor *inputs[] = {&x};
  minfer_node node{};
  node.struct_size = sizeof node;
  node.op = MINFER_OP_DEQUANTIZE;
  node.name = "dequantize_big";
  node.n_inputs = 1;
  node.inputs = inputs;
  node.output = &y;
  auto seg = backend_->compile({&node});
  backend_->execute(*seg, 0, {});
  backend_->synchronize();
  // Check blocks at the start, around 2^31/32 (where 32-bit math wraps) and at the end.
  std::vector<int64_t> probes;
  for (int64_t b = 0; b < 64; ++b) probes.push_back(b);
  for (int64_t b = (int64_t(1) << 26) - 64; b < (int64_t(1) << 26) + 64; ++b) probes.push_back(b);
  for (int64_t b = n_blocks - 64; b < n_blocks; ++b) probes.push_back(b);
  for (int64_t b : probes) {
    float want[32];
    minfer::quant::dequantize_row(MINFER_DTYPE_Q4_0, pattern.data() + (b % tile) * 18, want, 32);
    uint16_t got[32];
    out->read(uint64_t(b) * 64, got, sizeof got);
    for (int j = 0; j < 32; ++j)
      ASSERT_EQ(got[j], minfer::quant::f32_to_f16(want[j])) << "block " << b << " value " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance, ::testing::ValuesIn(targets()),
                         [](const auto &info) { return info.param.label; });

// Every op of the ABI, and every table/block dtype of the gather and dequantize ops, has cases.
TEST(ConformanceCoverage, EveryOpAndDtypeHasCases) {
  std::set<std::pair<int32_t, int32_t>> have;
  std::set<int32_t> ops;
  for (const Case &c : all_cases()) {
    ops.insert(c.op);
    for (int32_t dt : c.dtypes) have.insert({c.op, dt});
    EXPECT_NO_THROW(c.build()) << c.label;
  }
  // ALL_REDUCE is no kernel: the host runs it through group_all_reduce (test_tensor_parallel.cpp).
  for (int32_t op = 1; op < MINFER_OP_COUNT_; ++op)
    if (op != MINFER_OP_ALL_REDUCE) EXPECT_TRUE(ops.count(op)) << "op " << minfer_op_name(op) << " has no case";
  for (int32_t dt : minfer::test::block_dtypes()) {
    EXPECT_TRUE(have.count({MINFER_OP_GET_ROWS, dt})) << "get_rows has no " << minfer_dtype_name(dt) << " case";
    EXPECT_TRUE(have.count({MINFER_OP_DEQUANTIZE, dt})) << "dequantize has no " << minfer_dtype_name(dt) << " case";
  }
  EXPECT_TRUE(have.count({MINFER_OP_GET_ROWS, MINFER_DTYPE_F32}));
  EXPECT_TRUE(have.count({MINFER_OP_GET_ROWS, MINFER_DTYPE_F16}));
  EXPECT_TRUE(have.count({MINFER_OP_GET_ROWS, MINFER_DTYPE_BF16}));
}

}  // namespace
