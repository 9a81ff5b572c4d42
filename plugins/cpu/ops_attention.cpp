// plugins/cpu/ops_attention.cpp — causal grouped-query attention over a KV cache.
//
// Writes this step's K and V into the caches (rounded to f16 for an f16 cache), then each
// (token, head) pair computes softmax(q.K^T * scale) V over positions 0..n_past+t, reading
// K and V back from the cache so both cache types see exactly what later steps will see.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_backend.hpp"
#include "minfer/decode.hpp"
#include "minfer/op_contract.hpp"
#include "qdot.hpp"
#include "simd_math.hpp"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

std::string any(const minfer_node &) { return ""; }

// Dot product with eight independent partial sums, so the compiler can keep them in one
// vector register (a single running sum is a serial dependency it may not reorder).
inline float dot(const float *a, const float *b, int64_t n) {
  float part[8] = {};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) part[l] += a[d + l] * b[d + l];
  float s = 0;
  for (; d < n; ++d) s += a[d] * b[d];
  for (float x : part) s += x;
  return s;
}

// Per-thread scratch, grown on first use and then reused: no allocation per step.
struct Scratch {
  std::vector<float> k, v, score, acc;
};
Scratch &scratch() {
  thread_local Scratch s;
  return s;
}

// One query head over rows 0..rows-1 of its KV head (AVX-512, head_dim a multiple of 16):
// K and V are read in their cache type, f16 converted in registers.
template <class T>
MINFER_AVX512 void head_avx512(const float *qv, const T *krows, const T *vrows, int64_t stride, int64_t rows, int64_t hd, float scale,
                               float *score, float *out) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < rows; ++j) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(qv + d), load16(krows + j * stride + d), acc);
    score[j] = _mm512_reduce_add_ps(acc) * scale;
    mx = std::max(mx, score[j]);
  }
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < rows; j += 16) {
    const __mmask16 live = rows - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (rows - j)) - 1);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, score + j), _mm512_set1_ps(mx)));
    _mm512_mask_storeu_ps(score + j, live, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(live, e));
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t d = 0; d < hd; d += 16) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < rows; ++j) acc = _mm512_fmadd_ps(_mm512_set1_ps(score[j]), load16(vrows + j * stride + d), acc);
    _mm512_storeu_ps(out + d, _mm512_mul_ps(acc, inv));
  }
}

template <class T>
void attend(const minfer_node &n, const RunCtx &ctx) {
  const auto &p = sdk::params_of<minfer_attention_params>(n);
  const float *q = ptr<float>(*n.inputs[0]), *k = ptr<float>(*n.inputs[1]), *v = ptr<float>(*n.inputs[2]);
  T *kc = ptr<T>(*n.inputs[3]), *vc = ptr<T>(*n.inputs[4]);
  float *out = ptr<float>(*n.output);
  const int64_t tokens = sdk::run_rows(*n.inputs[0], ctx.args), n_past = ctx.args.n_past;
  const int64_t hd = p.head_dim, kvd = int64_t(p.n_kv_head) * hd, n_ctx = n.inputs[3]->shape[1];
  if (n_past < 0 || n_past + tokens > n_ctx)
    throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "positions " + std::to_string(n_past) + ".." + std::to_string(n_past + tokens - 1) +
                                                      " do not fit the KV cache of " + std::to_string(n_ctx));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < kvd; ++i) {
      const int64_t at = (n_past + t) * kvd + i;
      if constexpr (sizeof(T) == 2) {
        kc[at] = sdk::float_to_half(k[t * kvd + i]);
        vc[at] = sdk::float_to_half(v[t * kvd + i]);
      } else {
        kc[at] = k[t * kvd + i];
        vc[at] = v[t * kvd + i];
      }
    }
  const int64_t group = p.n_head / p.n_kv_head;
  if (ctx.isa >= Isa::Avx512Vnni && hd % 16 == 0) {
    ctx.pool.run(tokens * p.n_kv_head, [&](int64_t w0, int64_t w1, int) {
      Scratch &s = scratch();
      s.score.resize(size_t(n_past + tokens));
      for (int64_t w = w0; w < w1; ++w) {
        const int64_t ti = w / p.n_kv_head, kvh = w % p.n_kv_head;  // early and late tokens paired, as below
        const int64_t t = ti % 2 == 0 ? ti / 2 : tokens - 1 - ti / 2;
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
          head_avx512(q + (t * p.n_head + h) * hd, kc + kvh * hd, vc + kvh * hd, kvd, n_past + t + 1, hd, p.scale, s.score.data(),
                      out + (t * p.n_head + h) * hd);
      }
    });
    return;
  }
  // One work item per (token, KV head): the `group` query heads sharing a KV head use one
  // f32 copy of its K and V rows (an f16 cache is converted once per item, not per head).
  ctx.pool.run(tokens * p.n_kv_head, [&](int64_t w0, int64_t w1, int) {
    Scratch &s = scratch();
    const size_t rows = size_t(n_past + tokens);
    s.score.resize(rows);
    s.acc.resize(size_t(hd));
    if constexpr (sizeof(T) == 2) {
      s.k.resize(rows * size_t(hd));
      s.v.resize(rows * size_t(hd));
    }
    for (int64_t w = w0; w < w1; ++w) {
      // Later tokens attend over more rows; pairing early with late tokens gives each
      // thread's contiguous range about the same work.
      const int64_t ti = w / p.n_kv_head, kvh = w % p.n_kv_head;
      const int64_t t = ti % 2 == 0 ? ti / 2 : tokens - 1 - ti / 2, last = n_past + t;
      const float *krows, *vrows;
      int64_t stride;
      if constexpr (sizeof(T) == 2) {
        for (int64_t j = 0; j <= last; ++j) {
          halves_to_floats(kc + j * kvd + kvh * hd, s.k.data() + j * hd, hd, ctx.isa);
          halves_to_floats(vc + j * kvd + kvh * hd, s.v.data() + j * hd, hd, ctx.isa);
        }
        krows = s.k.data(), vrows = s.v.data(), stride = hd;
      } else {
        krows = kc + kvh * hd, vrows = vc + kvh * hd, stride = kvd;
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float *qv = q + (t * p.n_head + h) * hd;
        float *score = s.score.data(), *acc = s.acc.data(), mx = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          score[j] = dot(qv, krows + j * stride, hd) * p.scale;
          mx = std::max(mx, score[j]);
        }
        float sum = 0;
        for (int64_t j = 0; j <= last; ++j) sum += score[j] = std::exp(score[j] - mx);
        std::fill(acc, acc + hd, 0.0f);
        for (int64_t j = 0; j <= last; ++j) {
          const float wj = score[j], *vr = vrows + j * stride;
          for (int64_t d = 0; d < hd; ++d) acc[d] += wj * vr[d];
        }
        const float inv = 1.0f / sum;
        for (int64_t d = 0; d < hd; ++d) out[(t * p.n_head + h) * hd + d] = acc[d] * inv;
      }
    }
  });
}

void run_attention(const minfer_node &n, const RunCtx &ctx) {
  if (n.inputs[3]->dtype == MINFER_DTYPE_F16) attend<uint16_t>(n, ctx);
  else attend<float>(n, ctx);
}

const CpuOp kOps[] = {
    {MINFER_OP_ATTENTION, any, run_attention},
};

}  // namespace

std::span<const CpuOp> attention_ops() { return kOps; }

}  // namespace minfer::cpu
