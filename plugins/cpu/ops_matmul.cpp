// plugins/cpu/ops_matmul.cpp — y[t] = W x[t] for weights of every type.
//
// Threads split the weight's output rows, so the weights are read once per call whatever the
// batch. matmul_path picks the kernel: with AMX, many tokens times block-quantized weights go
// to tile products (amx_matmul.hpp); without, to the tiled int8 GEMM (int8_gemm.hpp). Few
// tokens take the row dots of qdot.hpp (Q4_0/Q5_0/Q8_0/Q4_K/Q5_K/Q6_K; four rows at a time for
// Q4_0/Q8_0 with VNNI; Q4_1/Q5_1/Q2_K/Q3_K on the GEMM's units, unit_row_dots); other
// types (and every type under isa scalar without a kernel) decode each row to f32 once and
// dot it with every token.
#include <algorithm>
#include <vector>

#include "amx_matmul.hpp"
#include "cpu_backend.hpp"
#include "decode_row.hpp"
#include "int8_gemm.hpp"
#include "panels.hpp"
#include "qdot.hpp"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

float dot(const float *a, const float *b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // eight lanes: the compiler vectorizes this
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// The tokens' activations quantized to 8 bits once per call, in the calling thread's buffer
// (reused across calls; the workers must read this thread's buffer, not their own).
const ActBlock *quantize_tokens(const float *x, int64_t tokens, int64_t k, ThreadPool &pool, Isa isa) {
  const int64_t kb = k / 32;
  thread_local std::vector<ActBlock> act;
  act.resize(size_t(tokens * kb));
  ActBlock *a = act.data();
  pool.run(tokens, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) quantize_activations(x + t * k, a + t * kb, k, isa);
  });
  return a;
}

namespace {

// The fewest rows a chunk of the row dots' dynamic split takes (ThreadPool::stream_grain: two
// chunks a thread): a multiple of the four-row kernels.
constexpr int64_t kRowGrain = 64;

// Row dots: activations quantized to 8 bits once, then int8 dots per weight block. The
// work is one list of segments (a dense matmul is one; MATMUL_ID's experts one each), so a
// decode token's k small expert matmuls are one pass of the pool, not k.
void matmul_quantized(int32_t dtype, int64_t k, int64_t m, const float *x, std::span<const MatmulSegment> segs, const RunCtx &ctx,
                      QDotFn dot_q) {
  const QDot4Fn dot4 = qdot4_for(dtype, ctx.isa);  // four rows at once where there is a kernel
  const int64_t rb = sdk::row_bytes(dtype, k), kb = k / 32;
  int64_t tokens = 0;
  for (const MatmulSegment &sg : segs) tokens += sg.tokens;
  const ActBlock *a = quantize_tokens(x, tokens, k, ctx.pool, ctx.isa);
  thread_local std::vector<int64_t> first;  // each segment's first token
  first.resize(segs.size());
  for (size_t i = 0, t = 0; i < segs.size(); t += size_t(segs[i].tokens), ++i) first[i] = int64_t(t);
  const int64_t *seg_first = first.data();
  // Tokens in groups of kMaxTokens: each weight row stays in L1 across its group, and each
  // weight block is decoded once per group.
  const int64_t rows = int64_t(segs.size()) * m;
  ctx.pool.run_dynamic(rows, ctx.pool.stream_grain(rows, kRowGrain), [&](int64_t i0, int64_t i1, int) {
    float out[kMaxTokens], out4[4 * kMaxTokens];
    for (int64_t i = i0; i < i1;) {
      const size_t si = size_t(i / m);
      const MatmulSegment &sg = segs[si];
      const int64_t o1 = std::min(i1 - int64_t(si) * m, m);
      const ActBlock *sa = a + seg_first[si] * kb;
      for (int64_t t0 = 0; t0 < sg.tokens; t0 += kMaxTokens) {
        const int nt = int(std::min<int64_t>(kMaxTokens, sg.tokens - t0));
        int64_t o = i - int64_t(si) * m;
        if (dot4 && nt > 1)  // decode: four weight streams measured no faster (tg32 41.6 vs 42.6 t/s)
          for (; o + 4 <= o1; o += 4) {
            dot4(sg.w + o * rb, rb, sa + t0 * kb, kb, nt, k, out4);
            for (int j = 0; j < nt; ++j)
              for (int r = 0; r < 4; ++r) sg.y[(t0 + j) * m + o + r] = out4[j * 4 + r];
          }
        for (; o < o1; ++o) {
          dot_q(sg.w + o * rb, sa + t0 * kb, kb, nt, k, out);
          for (int j = 0; j < nt; ++j) sg.y[(t0 + j) * m + o] = out[j];
        }
      }
      i = int64_t(si) * m + o1;
    }
  });
}

}  // namespace

bool takes_amx(int32_t dtype, Isa isa, int64_t tokens) {
  // Block weights on AMX tiles from kAmxMinTokens tokens on (the measured crossover).
  return isa == Isa::Amx && minfer_dtype_info(dtype).is_quantized && tokens >= kAmxMinTokens;
}

namespace {

// The kernels a matmul can run on; matmul_path is the one place that chooses.
enum class MatmulPath { Amx, Gemm, RowDots, Decoded };

// From kGemmMinTokens tokens on, the GEMM beats the row dots in whole steps. Alone, on a
// matrix that stays in L3, it wins from 4 (minfer-bench --op matmul, 896 x 4864, AMD EPYC
// Zen 4, 2 threads, us GEMM | row dots: avx512vnni Q4_0 4: 192 | 268, 8: 310 | 496; avx2 Q4_0
// 4: 281 | 398), but a decode step streams its weights from memory, which the row dots
// overlap with their arithmetic and the packing does not: 0.5B Q4_0, minfer-bench --parallel
// 1,4,8,16 --npp 32, S_TG t/s with the GEMM from 4 | 8 | 16 tokens | never: B=4 106-116 |
// 119-145 | 111-132 | 116-164; B=8 - | 143-149 | 129-131 | 120-156; B=16 - | 201 | 172-203 | 118-128.
constexpr int64_t kGemmMinTokens = 8;

// The row dots on the GEMM's units (Q4_1, Q5_1, Q2_K, Q3_K: unit_row_dots) beat its packing
// at one and two tokens only (2048 x 16384, Zen 4 EPYC, 2 threads, us row dots | GEMM: Q5_K
// when it ran on its unit 1: 1735 | 1918, 2: 1961 | 2048, 3: 2445-2498 | 2166-2213, 4: 3141 |
// 2109; Q4_1 1: 890 | 1167, 3: 1276-1332 | 1407-1467, 4: 2526 | 1308; Q2_K 2: 1522 | 2558).
// A type's own row kernel (Q5_K's under AVX2 now: 3: 1638-1716 | 2399-2515, 5: 2727-2988 |
// 3272-3663, 7: 3576-3598 | 3036-3175) keeps kGemmMinTokens, as Q4_K and Q6_K do.
constexpr int64_t kUnitGemmMinTokens = 3;

MatmulPath matmul_path(int32_t dtype, Isa isa, int64_t tokens) {
  if (takes_amx(dtype, isa, tokens)) return MatmulPath::Amx;
  const QDotFn dots = qdot_for(dtype, isa);
  const bool row_dots = dots != nullptr;
  const int64_t gemm_from = row_dots && dots == unit_row_dots(dtype, isa) ? kUnitGemmMinTokens : kGemmMinTokens;
  if (gemm_takes(dtype, isa) && (tokens >= gemm_from || !row_dots)) return MatmulPath::Gemm;
  return row_dots ? MatmulPath::RowDots : MatmulPath::Decoded;
}

}  // namespace

const uint8_t *weight_panels(const minfer_tensor &w, const RunCtx &ctx) {
  return panel_dtype(w.dtype) ? sdk::buffer_of<CpuBuffer>(w).panels(w.offset, ctx.pool) : nullptr;
}

namespace {

void run_matmul(const minfer_node &n, const RunCtx &ctx) {
  const minfer_tensor &w = *n.inputs[0];
  if (const uint8_t *panels = weight_panels(w, ctx)) {
    const int64_t k = w.shape[0], tokens = sdk::run_rows(*n.inputs[1], ctx.args);
    if (matmul_path(w.dtype, ctx.isa, tokens) == MatmulPath::Amx)
      return amx_matmul(w.dtype, panels, sdk::row_bytes(w.dtype, k), k, w.shape[1], ptr<float>(*n.inputs[1]), tokens, ptr<float>(*n.output),
                        ctx.pool, true);
    const PanelSegment seg{panels, 0, tokens, ptr<float>(*n.output)};
    return panel_matmul(w.dtype, ctx.isa, k, w.shape[1], quantize_tokens(ptr<float>(*n.inputs[1]), tokens, k, ctx.pool, ctx.isa), {&seg, 1},
                        ctx.pool);
  }
  matmul_rows(w.dtype, ptr(w), w.shape[0], w.shape[1], ptr<float>(*n.inputs[1]), sdk::run_rows(*n.inputs[1], ctx.args),
              ptr<float>(*n.output), ctx);
}

}  // namespace

void matmul_rows(int32_t dtype, const uint8_t *wb, int64_t k, int64_t m, const float *x, int64_t tokens, float *y, const RunCtx &ctx) {
  const int64_t rb = sdk::row_bytes(dtype, k);
  switch (matmul_path(dtype, ctx.isa, tokens)) {
    case MatmulPath::Amx: return amx_matmul(dtype, wb, rb, k, m, x, tokens, y, ctx.pool);
    case MatmulPath::Gemm: return int8_gemm(dtype, ctx.isa, wb, rb, k, m, quantize_tokens(x, tokens, k, ctx.pool, ctx.isa), tokens, y, ctx.pool);
    case MatmulPath::RowDots: {
      const MatmulSegment seg{wb, tokens, y};
      return matmul_quantized(dtype, k, m, x, {&seg, 1}, ctx, qdot_for(dtype, ctx.isa));
    }
    case MatmulPath::Decoded: break;
  }
  ctx.pool.run(m, [&](int64_t o0, int64_t o1, int) {
    std::vector<float> row(dtype == MINFER_DTYPE_F32 ? 0 : size_t(k));
    for (int64_t o = o0; o < o1; ++o) {
      const float *wr = reinterpret_cast<const float *>(wb + o * rb);
      if (dtype != MINFER_DTYPE_F32) {
        decode_row_f32(dtype, wb + o * rb, row.data(), k);
        wr = row.data();
      }
      for (int64_t t = 0; t < tokens; ++t) y[t * m + o] = dot(wr, x + t * k, k);
    }
  });
}

bool matmul_segments(int32_t dtype, int64_t k, int64_t m, const float *x, std::span<const MatmulSegment> segs, const RunCtx &ctx) {
  for (const MatmulSegment &sg : segs)
    if (matmul_path(dtype, ctx.isa, sg.tokens) != MatmulPath::RowDots) return false;
  matmul_quantized(dtype, k, m, x, segs, ctx, qdot_for(dtype, ctx.isa));
  return true;
}

std::string weight_known(const minfer_node &n) {
  const int32_t dt = n.inputs[0]->dtype;
  if (dt == MINFER_DTYPE_F32 || dt == MINFER_DTYPE_F16 || dt == MINFER_DTYPE_BF16 || sdk::visit_block_dtype(dt, [](auto) {}))
    return "";
  return std::string("no decoder for ") + minfer_dtype_name(dt);
}

namespace {

const CpuOp kOps[] = {
    {MINFER_OP_MATMUL, weight_known, run_matmul},
};

}  // namespace

std::span<const CpuOp> matmul_ops() { return kOps; }

std::string explain_matmul(const minfer_node &n, Isa isa, int64_t tokens) {
  const int32_t dt = n.inputs[0]->dtype;
  if (n.op == MINFER_OP_MATMUL_ID) tokens = 1;  // a decode token's expert reads one row per expert
  const std::string type = minfer_dtype_name(dt);
  const minfer_tensor &w = *n.inputs[0];
  if (panel_dtype(dt) && sdk::buffer_of<CpuBuffer>(w).holds_panels(w.offset)) {
    if (matmul_path(dt, isa, tokens) == MatmulPath::Amx)
      return "amx bf16 tiles (" + type + " weights repacked at load into 16-row panels, decoded a panel at a time to bf16, f32 accumulators)";
    return std::string(isa_name(panel_isa(isa))) + " int8 dot products on " + type +
           " weights repacked at load into 16-row panels (activations rounded to 8 bits)";
  }
  switch (matmul_path(dt, isa, tokens)) {
    case MatmulPath::Amx: return "amx bf16 tiles (" + type + " weights decoded to bf16 panels, f32 accumulators)";
    case MatmulPath::Gemm:
      return std::string(isa_name(isa)) + " tiled int8 GEMM (" + type + " weights packed per call into 16-row panels, activations rounded to 8 bits)";
    case MatmulPath::RowDots:  // AMX machines run the few-token steps on the AVX-512 VNNI kernels
      return std::string(isa_name(isa == Isa::Amx ? Isa::Avx512Vnni : isa)) + " int8 dot products on the " + type + " blocks (activations rounded to 8 bits)";
    case MatmulPath::Decoded: break;
  }
  return dt == MINFER_DTYPE_F32 ? "f32 dot products" : "f32 dot products (" + type + " rows decoded to f32)";
}

}  // namespace minfer::cpu
