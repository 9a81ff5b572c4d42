// plugins/cpu/ops_attention.cpp — causal grouped-query attention over a paged KV cache.
//
// Writes this step's K and V into the caches at each token's (slot, position) (rounded to
// f16 for an f16 cache), then each (token, head) pair computes softmax(q.K^T * scale) V over
// positions 0..its own of its slot (the last `window` of them on sliding-window layers; each
// score capped by softcap * tanh(s / softcap) where the params say), reading K and V back from the cache so both cache types
// see exactly what later steps will see: blocks of a slot's consecutive tokens over tiles of
// 32 keys, each key's row found through the slot's page table (block_attention); a tile is
// converted to f32 once (K transposed) and its queries go several at a time (the Tile types).
#include <algorithm>
#include <bit>
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

// Per-thread scratch, grown on first use and then reused: no allocation per step.
struct Scratch {
  std::vector<float> k, krows, v, score, acc;  // k, v: a tile converted to f32 (K transposed); krows: K as rows
};
Scratch &scratch() {
  thread_local Scratch s;
  return s;
}

// Where a token's positions live: position j is row pages[j / page_size] * page_size + j % page_size.
struct PageWalk {
  const int32_t *pages;  // the slot's page table row
  int64_t page_size;
};

// The positions a token attends to, and how its scores are shaped (ABI 1.6: Gemma's cap and
// sliding windows).
struct Span {
  int64_t first, last;
  float scale, softcap;
  float score(float dot) const {
    const float s = dot * scale;
    return softcap > 0 ? softcap * std::tanh(s / softcap) : s;
  }
};

// A block of up to kBlockTokens consecutive tokens of one slot with every query head of one
// KV head, over their keys in tiles of kKeyTile (flash-attention order): each tile's K and V
// rows are read from the cache once for the block's tokens x heads, and each (token, head)
// keeps a running max, sum and output. Reading the keys once per (token, head) instead
// streamed the whole cache per query: a 16,384-token prompt of Qwen2-0.5B spent over ten
// minutes in attention on a 2-core Xeon. The walk is written once (block_attention); the
// vector work on a tile is each instruction set's (TileAvx512, TileAvx2: a call does a whole
// tile, so the calls across targets cost nothing that shows).
constexpr int kBlockTokens = 8, kKeyTile = 32;

struct TokenBlock {
  int64_t t0, nt;  // the step's tokens t0..t0+nt-1: one slot, consecutive positions
};

// Per (token, head) of a block: running max, sum and output (hd values), in the thread's scratch.
struct BlockState {
  float *m, *l, *acc;
};

// One (token, head) query of a block on a tile: its q, output sums, running max and sum, and
// its keys lo..hi of the tile. Span comes first (TileQuery points at it).
struct TileQuery {
  const float *q;
  float *acc, *m, *l;
  int lo, hi;
  const Span *sp;
};

// A tile's work (each instruction set's Tile): prepare() turns the tile's K and V rows (f32 or
// f16 from the cache) into f32 once for the block, K transposed (kt[d * kKeyTile + j], keys
// nk..31 zero) so that a query's 32 scores are vectors of FMAs over d with no horizontal sum a
// key, V as rows (vf). It reads the cache key by key, K's row then V's, K's into rows (krows)
// that it transposes from there: a cache at depth comes from DRAM, and all of a tile's K rows
// column by column and then its V rows took ~25% longer a tile (Qwen2-0.5B's shape, 4,096
// keys, one thread, Zen 5), however far ahead software prefetches asked for them. run() takes up to kQueries queries of the block: their scaled (capped)
// scores, each one's online-softmax update (running max m, sum l, output rescaled), and their
// weighted V rows added to acc; finish() writes acc * inv. The scores sum sixteen dimensions
// at a time, even and odd ones apart, then add: one running sum a lane over a 128- or
// 256-value head strayed past the conformance bound. Several queries at once give each loaded
// K and V piece several uses and independent FMA chains: one query at a time was bound by one
// chain's latency (a 2,000-token prompt's last chunk on Qwen2-0.5B: attention 815 -> 664 ms
// transposed alone, against ~2.3x faster at depth with four queries; AVX-512, Zen 5).

// The head size a Tile instance works with: HD where it is fixed at compile time (the common
// 64 and 128), else the run's. With it fixed, the loops over a head unroll and a tile's loads
// issue together: `minfer-bench --op attention -d 4096 --tokens 1` (Qwen2-0.5B's heads, 2
// threads, Zen 5, three alternating rounds) 228-298 -> 157-175 us a call, `isa: avx2`
// 316-324 -> 202-252; head size 128 (28 / 4 heads) 796-903 -> 578-591.
template <int HD>
constexpr int64_t fixed_head_dim(int64_t hd) {
  return HD > 0 ? HD : hd;
}

// r[c] = column c of the 16 x 16 block of rows r[0..15]: pairs of rows interleaved, 4 x 4 blocks
// within each 128-bit lane, then the lanes gathered (64 shuffles, no scalar moves).
MINFER_AVX512 inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  for (int i = 0; i < 4; ++i) {  // u[4i + m] lane k: column 4k + m of rows 4i..4i+3
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44), u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44), u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 x0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88), x1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xDD);
    const __m512 y0 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88), y1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xDD);
    r[m] = _mm512_shuffle_f32x4(x0, y0, 0x88), r[8 + m] = _mm512_shuffle_f32x4(x0, y0, 0xDD);
    r[4 + m] = _mm512_shuffle_f32x4(x1, y1, 0x88), r[12 + m] = _mm512_shuffle_f32x4(x1, y1, 0xDD);
  }
}

template <int HD>
struct TileAvx512 {  // head_dim a multiple of 16
  static constexpr int kQueries = 4;
  template <class T>
  MINFER_AVX512 static void prepare(const T *const *kr, const T *const *vr, int nk, int64_t hd, float *kt, float *vf, float *krows) {
    hd = fixed_head_dim<HD>(hd);
    for (int j = 0; j < nk; ++j)  // key by key, K's row and V's (see block_attention)
      for (int64_t d = 0; d < hd; d += 16) {
        _mm512_storeu_ps(krows + j * hd + d, load16(kr[j] + d));
        _mm512_storeu_ps(vf + j * hd + d, load16(vr[j] + d));
      }
    for (int64_t d0 = 0; d0 < hd; d0 += 16)
      for (int half = 0; half < kKeyTile; half += 16) {
        __m512 r[16];  // keys half..half+15, values d0..d0+15
        for (int j = 0; j < 16; ++j) r[j] = half + j < nk ? _mm512_loadu_ps(krows + (half + j) * hd + d0) : _mm512_setzero_ps();
        transpose16(r);
        for (int c = 0; c < 16; ++c) _mm512_store_ps(kt + (d0 + c) * kKeyTile + half, r[c]);
      }
  }
  MINFER_AVX512 static void run(const TileQuery *b, int n, const float *kt, const float *vf, int64_t hd) {
    hd = fixed_head_dim<HD>(hd);
    switch (n) {
      case 4: return run_n<4>(b, kt, vf, hd);
      case 3: return run_n<3>(b, kt, vf, hd);
      case 2: return run_n<2>(b, kt, vf, hd);
      default: return run_n<1>(b, kt, vf, hd);
    }
  }
  template <int Q>
  MINFER_AVX512 static void run_n(const TileQuery *b, const float *kt, const float *vf, int64_t hd) {
    hd = fixed_head_dim<HD>(hd);
    __m512 a[Q][2];
    for (int q = 0; q < Q; ++q) a[q][0] = a[q][1] = _mm512_setzero_ps();
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {
      __m512 part[Q][2][2];
      for (int q = 0; q < Q; ++q) part[q][0][0] = part[q][0][1] = part[q][1][0] = part[q][1][1] = _mm512_setzero_ps();
      for (int64_t d = d0; d < d0 + 16; d += 2)
        for (int p = 0; p < 2; ++p) {
          const __m512 k0 = _mm512_load_ps(kt + (d + p) * kKeyTile), k1 = _mm512_load_ps(kt + (d + p) * kKeyTile + 16);
          for (int q = 0; q < Q; ++q) {
            const __m512 qd = _mm512_set1_ps(b[q].q[d + p]);
            part[q][0][p] = _mm512_fmadd_ps(qd, k0, part[q][0][p]);
            part[q][1][p] = _mm512_fmadd_ps(qd, k1, part[q][1][p]);
          }
        }
      for (int q = 0; q < Q; ++q)
        for (int h = 0; h < 2; ++h) a[q][h] = _mm512_add_ps(a[q][h], _mm512_add_ps(part[q][h][0], part[q][h][1]));
    }
    alignas(64) float s[Q][kKeyTile];
    float rescale[Q];
    int jlo = kKeyTile, jhi = -1;
    for (int q = 0; q < Q; ++q) {
      const TileQuery &x = b[q];
      const __m512 scale = _mm512_set1_ps(x.sp->scale);
      _mm512_store_ps(s[q], _mm512_mul_ps(a[q][0], scale));
      _mm512_store_ps(s[q] + 16, _mm512_mul_ps(a[q][1], scale));
      if (x.sp->softcap > 0)
        for (int j = x.lo; j <= x.hi; ++j) s[q][j] = x.sp->softcap * std::tanh(s[q][j] / x.sp->softcap);
      const __mmask32 live = __mmask32(((uint64_t(1) << (x.hi + 1)) - 1) & ~((uint64_t(1) << x.lo) - 1));
      const __m512 m0 = _mm512_mask_blend_ps(__mmask16(live), _mm512_set1_ps(-INFINITY), _mm512_load_ps(s[q]));
      const __m512 m1 = _mm512_mask_blend_ps(__mmask16(live >> 16), _mm512_set1_ps(-INFINITY), _mm512_load_ps(s[q] + 16));
      const float m_new = std::max(*x.m, _mm512_reduce_max_ps(_mm512_max_ps(m0, m1)));
      rescale[q] = std::exp(*x.m - m_new);  // exp(-inf) = 0 at the first tile
      *x.l = *x.l * rescale[q] + weigh(s[q], x.lo, x.hi, m_new);  // s: 0 off lo..hi
      *x.m = m_new;
      jlo = std::min(jlo, x.lo), jhi = std::max(jhi, x.hi);
    }
    for (int64_t c0 = 0; c0 < hd; c0 += 64) {
      switch (std::min<int64_t>(4, (hd - c0) / 16)) {
        case 4: accumulate<Q, 4>(b, s, rescale, jlo, jhi, vf, hd, c0); break;
        case 3: accumulate<Q, 3>(b, s, rescale, jlo, jhi, vf, hd, c0); break;
        case 2: accumulate<Q, 2>(b, s, rescale, jlo, jhi, vf, hd, c0); break;
        default: accumulate<Q, 1>(b, s, rescale, jlo, jhi, vf, hd, c0); break;
      }
    }
  }
  MINFER_AVX512 static float weigh(float *s, int lo, int hi, float m) {
    const __mmask32 live = __mmask32(((uint64_t(1) << (hi + 1)) - 1) & ~((uint64_t(1) << lo) - 1));
    __m512 sum = _mm512_setzero_ps();
    for (int h = 0; h < kKeyTile; h += 16) {
      const __mmask16 lane = __mmask16(live >> h);
      const __m512 e = _mm512_maskz_mov_ps(lane, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(lane, s + h), _mm512_set1_ps(m))));
      _mm512_storeu_ps(s + h, e);
      sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
  }
  // Dimensions c0..c0 + 16 C of the Q queries' outputs: acc = acc * rescale + sum_j s[j] V_j.
  template <int Q, int C>
  MINFER_AVX512 static void accumulate(const TileQuery *b, const float (*s)[kKeyTile], const float *rescale, int jlo, int jhi, const float *vf,
                                       int64_t hd, int64_t c0) {
    hd = fixed_head_dim<HD>(hd);
    __m512 part[Q][C];
    for (int q = 0; q < Q; ++q)
      for (int c = 0; c < C; ++c) part[q][c] = _mm512_setzero_ps();
    for (int j = jlo; j <= jhi; ++j) {
      __m512 v[C];
      for (int c = 0; c < C; ++c) v[c] = _mm512_loadu_ps(vf + j * hd + c0 + 16 * c);
      for (int q = 0; q < Q; ++q) {
        const __m512 w = _mm512_set1_ps(s[q][j]);
        for (int c = 0; c < C; ++c) part[q][c] = _mm512_fmadd_ps(w, v[c], part[q][c]);
      }
    }
    for (int q = 0; q < Q; ++q)
      for (int c = 0; c < C; ++c) {
        float *o = b[q].acc + c0 + 16 * c;
        _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_loadu_ps(o), _mm512_set1_ps(rescale[q]), part[q][c]));
      }
  }
  MINFER_AVX512 static void finish(float *o, const float *acc, float inv, int64_t hd) {
    hd = fixed_head_dim<HD>(hd);
    for (int64_t d = 0; d < hd; d += 16) _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(acc + d), _mm512_set1_ps(inv)));
  }
};

MINFER_AVX2_FMA inline __m256 load8(const float *p) { return _mm256_loadu_ps(p); }
MINFER_AVX2_FMA inline __m256 load8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
MINFER_AVX2_FMA inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// r[c] = column c of the 8 x 8 block of rows r[0..7] (as transpose16, lanes of 128 bits).
MINFER_AVX2_FMA inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  for (int i = 0; i < 2; ++i) {  // u[4i + m] lane k: column 4k + m of rows 4i..4i+3
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44), u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44), u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int m = 0; m < 4; ++m) r[m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x20), r[4 + m] = _mm256_permute2f128_ps(u[m], u[4 + m], 0x31);
}

// AVX2 as TileAvx512 on 16 registers: two queries at a time, a tile's keys in two halves of 16.
template <int HD>
struct TileAvx2 {  // head_dim a multiple of 8
  static constexpr int kQueries = 2;
  template <class T>
  MINFER_AVX2_FMA static void prepare(const T *const *kr, const T *const *vr, int nk, int64_t hd, float *kt, float *vf, float *krows) {
    hd = fixed_head_dim<HD>(hd);
    for (int j = 0; j < nk; ++j)  // key by key, K's row and V's (see block_attention)
      for (int64_t d = 0; d < hd; d += 8) {
        _mm256_storeu_ps(krows + j * hd + d, load8(kr[j] + d));
        _mm256_storeu_ps(vf + j * hd + d, load8(vr[j] + d));
      }
    for (int64_t d0 = 0; d0 < hd; d0 += 8)
      for (int k8 = 0; k8 < kKeyTile; k8 += 8) {
        __m256 r[8];
        for (int j = 0; j < 8; ++j) r[j] = k8 + j < nk ? _mm256_loadu_ps(krows + (k8 + j) * hd + d0) : _mm256_setzero_ps();
        transpose8(r);
        for (int c = 0; c < 8; ++c) _mm256_store_ps(kt + (d0 + c) * kKeyTile + k8, r[c]);
      }
  }
  MINFER_AVX2_FMA static void run(const TileQuery *b, int n, const float *kt, const float *vf, int64_t hd) {
    hd = fixed_head_dim<HD>(hd);
    if (n == 2) return run_n<2>(b, kt, vf, hd);
    run_n<1>(b, kt, vf, hd);
  }
  template <int Q>
  MINFER_AVX2_FMA static void run_n(const TileQuery *b, const float *kt, const float *vf, int64_t hd) {
    hd = fixed_head_dim<HD>(hd);
    alignas(32) float s[Q][kKeyTile];
    for (int half = 0; half < kKeyTile; half += 16) {  // keys half..half+15: sixteen dimensions a short sum, even and odd apart
      __m256 a[Q][2];
      for (int q = 0; q < Q; ++q) a[q][0] = a[q][1] = _mm256_setzero_ps();
      for (int64_t d0 = 0; d0 < hd; d0 += 16) {
        __m256 part[Q][2][2];
        for (int q = 0; q < Q; ++q) part[q][0][0] = part[q][0][1] = part[q][1][0] = part[q][1][1] = _mm256_setzero_ps();
        for (int64_t d = d0; d < std::min<int64_t>(d0 + 16, hd); d += 2)
          for (int p = 0; p < 2; ++p) {
            const float *k = kt + (d + p) * kKeyTile + half;
            const __m256 k0 = _mm256_load_ps(k), k1 = _mm256_load_ps(k + 8);
            for (int q = 0; q < Q; ++q) {
              const __m256 qd = _mm256_set1_ps(b[q].q[d + p]);
              part[q][0][p] = _mm256_fmadd_ps(qd, k0, part[q][0][p]);
              part[q][1][p] = _mm256_fmadd_ps(qd, k1, part[q][1][p]);
            }
          }
        for (int q = 0; q < Q; ++q)
          for (int h = 0; h < 2; ++h) a[q][h] = _mm256_add_ps(a[q][h], _mm256_add_ps(part[q][h][0], part[q][h][1]));
      }
      for (int q = 0; q < Q; ++q) {
        const __m256 scale = _mm256_set1_ps(b[q].sp->scale);
        _mm256_store_ps(s[q] + half, _mm256_mul_ps(a[q][0], scale));
        _mm256_store_ps(s[q] + half + 8, _mm256_mul_ps(a[q][1], scale));
      }
    }
    float rescale[Q];
    int jlo = kKeyTile, jhi = -1;
    for (int q = 0; q < Q; ++q) {
      const TileQuery &x = b[q];
      if (x.sp->softcap > 0)
        for (int j = x.lo; j <= x.hi; ++j) s[q][j] = x.sp->softcap * std::tanh(s[q][j] / x.sp->softcap);
      float mt = -INFINITY;
      for (int j = x.lo; j <= x.hi; ++j) mt = std::max(mt, s[q][j]);
      const float m_new = std::max(*x.m, mt);
      rescale[q] = std::exp(*x.m - m_new);  // exp(-inf) = 0 at the first tile
      *x.l = *x.l * rescale[q] + weigh(s[q], x.lo, x.hi, m_new);  // s: 0 off lo..hi
      *x.m = m_new;
      jlo = std::min(jlo, x.lo), jhi = std::max(jhi, x.hi);
    }
    for (int64_t c0 = 0; c0 < hd; c0 += 32) {
      switch (std::min<int64_t>(4, (hd - c0) / 8)) {
        case 4: accumulate<Q, 4>(b, s, rescale, jlo, jhi, vf, hd, c0); break;
        case 3: accumulate<Q, 3>(b, s, rescale, jlo, jhi, vf, hd, c0); break;
        case 2: accumulate<Q, 2>(b, s, rescale, jlo, jhi, vf, hd, c0); break;
        default: accumulate<Q, 1>(b, s, rescale, jlo, jhi, vf, hd, c0); break;
      }
    }
  }
  MINFER_AVX2_FMA static float weigh(float *s, int lo, int hi, float m) {
    __m256 sum = _mm256_setzero_ps();
    const __m256 first = _mm256_set1_ps(float(lo)), last = _mm256_set1_ps(float(hi));
    for (int h = 0; h < kKeyTile; h += 8) {
      const __m256 j = _mm256_add_ps(_mm256_set1_ps(float(h)), _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
      const __m256 live = _mm256_and_ps(_mm256_cmp_ps(j, first, _CMP_GE_OQ), _mm256_cmp_ps(j, last, _CMP_LE_OQ));
      // Lanes off the span may hold stale scores: only the live ones go through exp.
      const __m256 x = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_loadu_ps(s + h), live);
      const __m256 e = _mm256_and_ps(exp256(_mm256_sub_ps(x, _mm256_set1_ps(m))), live);
      _mm256_storeu_ps(s + h, e);
      sum = _mm256_add_ps(sum, e);
    }
    return hsum8(sum);
  }
  // Dimensions c0..c0 + 8 C of the Q queries' outputs: acc = acc * rescale + sum_j s[j] V_j.
  template <int Q, int C>
  MINFER_AVX2_FMA static void accumulate(const TileQuery *b, const float (*s)[kKeyTile], const float *rescale, int jlo, int jhi, const float *vf,
                                         int64_t hd, int64_t c0) {
    hd = fixed_head_dim<HD>(hd);
    __m256 part[Q][C];
    for (int q = 0; q < Q; ++q)
      for (int c = 0; c < C; ++c) part[q][c] = _mm256_setzero_ps();
    for (int j = jlo; j <= jhi; ++j) {
      __m256 v[C];
      for (int c = 0; c < C; ++c) v[c] = _mm256_loadu_ps(vf + j * hd + c0 + 8 * c);
      for (int q = 0; q < Q; ++q) {
        const __m256 w = _mm256_set1_ps(s[q][j]);
        for (int c = 0; c < C; ++c) part[q][c] = _mm256_fmadd_ps(w, v[c], part[q][c]);
      }
    }
    for (int q = 0; q < Q; ++q)
      for (int c = 0; c < C; ++c) {
        float *o = b[q].acc + c0 + 8 * c;
        _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_loadu_ps(o), _mm256_set1_ps(rescale[q]), part[q][c]));
      }
  }
  MINFER_AVX2_FMA static void finish(float *o, const float *acc, float inv, int64_t hd) {
    hd = fixed_head_dim<HD>(hd);
    for (int64_t d = 0; d < hd; d += 8) _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), _mm256_set1_ps(inv)));
  }
};

// Plain C for any head_dim (other CPUs, or the isa option's `scalar`), one query at a time on
// the same converted tile; the loops are simple enough for the compiler to vectorize.
struct TileScalar {
  static constexpr int kQueries = 1;
  template <class T>
  static void prepare(const T *const *kr, const T *const *vr, int nk, int64_t hd, float *kt, float *vf, float *) {
    const auto f32 = [](T v) { if constexpr (sizeof(T) == 2) return sdk::half_to_float(v); else return v; };
    for (int64_t d = 0; d < hd; ++d)
      for (int j = 0; j < kKeyTile; ++j) kt[d * kKeyTile + j] = j < nk ? f32(kr[j][d]) : 0.0f;
    for (int j = 0; j < nk; ++j)
      for (int64_t d = 0; d < hd; ++d) vf[j * hd + d] = f32(vr[j][d]);
  }
  static void run(const TileQuery *b, int, const float *kt, const float *vf, int64_t hd) {
    const TileQuery &x = *b;
    float s[kKeyTile] = {}, part[kKeyTile];
    for (int64_t d0 = 0; d0 < hd; d0 += 16) {  // sixteen dimensions a short sum
      std::fill(part, part + kKeyTile, 0.0f);
      for (int64_t d = d0; d < std::min<int64_t>(d0 + 16, hd); ++d)
        for (int j = 0; j < kKeyTile; ++j) part[j] += x.q[d] * kt[d * kKeyTile + j];
      for (int j = 0; j < kKeyTile; ++j) s[j] += part[j];
    }
    float mt = -INFINITY;
    for (int j = x.lo; j <= x.hi; ++j) mt = std::max(mt, s[j] = x.sp->score(s[j]));
    const float m_new = std::max(*x.m, mt), rescale = std::exp(*x.m - m_new), sum = weigh(s, x.lo, x.hi, m_new);
    *x.l = *x.l * rescale + sum, *x.m = m_new;
    for (int64_t d = 0; d < hd; ++d) x.acc[d] *= rescale;
    for (int j = x.lo; j <= x.hi; ++j)
      for (int64_t d = 0; d < hd; ++d) x.acc[d] += s[j] * vf[j * hd + d];
  }
  static float weigh(float *s, int lo, int hi, float m) {
    float sum = 0;
    for (int j = 0; j < kKeyTile; ++j) sum += s[j] = j >= lo && j <= hi ? std::exp(s[j] - m) : 0.0f;
    return sum;
  }
  static void finish(float *o, const float *acc, float inv, int64_t hd) {
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
  }
};

template <class Tile, class T>
void block_attention(const float *q, int64_t n_head, int64_t h0, int64_t group, const T *kbase, const T *vbase, int64_t stride,
                     const PageWalk &walk, const Span *spans, const TokenBlock &b, int64_t hd, BlockState st, float *out,
                     int64_t keys_lo = 0, int64_t keys_hi = INT64_MAX) {
  const int64_t pairs = b.nt * group, P = walk.page_size;
  const int page_shift = std::countr_zero(uint64_t(P));
  for (int64_t i = 0; i < pairs; ++i) {
    st.m[i] = -INFINITY, st.l[i] = 0;
    std::fill(st.acc + i * hd, st.acc + (i + 1) * hd, 0.0f);
  }
  int64_t key_first = spans[0].first, key_last = spans[0].last;
  for (int64_t i = 1; i < b.nt; ++i) key_first = std::min(key_first, spans[i].first), key_last = std::max(key_last, spans[i].last);
  key_first = std::max(key_first, keys_lo), key_last = std::min(key_last, keys_hi);  // a split's share (out null: st is the result)
  const T *kr[kKeyTile], *vr[kKeyTile];
  std::vector<float> &kf = scratch().k, &vf = scratch().v, &krows = scratch().krows;
  kf.resize(size_t(kKeyTile * hd) + 16), vf.resize(size_t(kKeyTile * hd)), krows.resize(size_t(kKeyTile * hd));
  float *kt = reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(kf.data()) + 63) & ~uintptr_t(63));  // aligned for the vector loads
  for (int64_t k0 = key_first; k0 <= key_last; k0 += kKeyTile) {
    const int nk = int(std::min<int64_t>(kKeyTile, key_last + 1 - k0));
    for (int j = 0; j < nk; ++j) {  // pages of a power-of-two size (the op contract checks): a shift and a mask, not a division a key
      const int64_t at = k0 + j, row = (int64_t(walk.pages[at >> page_shift]) << page_shift) + (at & (P - 1));
      kr[j] = kbase + row * stride, vr[j] = vbase + row * stride;
    }
    Tile::prepare(kr, vr, nk, hd, kt, vf.data(), krows.data());
    TileQuery batch[Tile::kQueries];  // the block's queries with keys in the tile, kQueries at a time
    int n = 0;
    for (int64_t i = 0; i < b.nt; ++i) {
      const Span &sp = spans[i];
      const int lo = int(std::max<int64_t>(0, sp.first - k0)), hi = int(std::min<int64_t>(nk - 1, sp.last - k0));
      if (lo > hi) continue;  // none of this token's keys in the tile
      for (int64_t g = 0; g < group; ++g) {
        const int64_t pi = i * group + g;
        batch[n++] = {q + ((b.t0 + i) * n_head + h0 + g) * hd, st.acc + pi * hd, st.m + pi, st.l + pi, lo, hi, &sp};
        if (n == Tile::kQueries) Tile::run(batch, n, kt, vf.data(), hd), n = 0;
      }
    }
    if (n) Tile::run(batch, n, kt, vf.data(), hd);
  }
  if (!out) return;
  for (int64_t i = 0; i < b.nt; ++i)
    for (int64_t g = 0; g < group; ++g) {
      const int64_t pi = i * group + g;
      Tile::finish(out + ((b.t0 + i) * n_head + h0 + g) * hd, st.acc + pi * hd, 1.0f / st.l[pi], hd);
    }
}

template <class T>
void attend(const minfer_node &n, const RunCtx &ctx) {
  const auto &p = sdk::params_of<minfer_attention_params>(n);
  const float *q = ptr<float>(*n.inputs[0]), *k = ptr<float>(*n.inputs[1]), *v = ptr<float>(*n.inputs[2]);
  T *kc = ptr<T>(*n.inputs[3]), *vc = ptr<T>(*n.inputs[4]);
  const int32_t *pos = ptr<int32_t>(*n.inputs[5]), *slot = ptr<int32_t>(*n.inputs[6]), *table = ptr<int32_t>(*n.inputs[7]);
  float *out = ptr<float>(*n.output);
  const int64_t tokens = sdk::run_rows(*n.inputs[0], ctx.args);
  const int64_t hd = p.head_dim, kvd = int64_t(p.n_kv_head) * hd, P = p.page_size;
  const int64_t n_pages = n.inputs[3]->shape[1] / P, max_pages = n.inputs[7]->shape[0], n_slots = n.inputs[7]->shape[1];
  // Every index the step gives is checked before anything is written: a bad one is the host's
  // error, never a write outside the caches.
  for (int64_t t = 0; t < tokens; ++t) {
    if (slot[t] < 0 || slot[t] >= n_slots || pos[t] < 0 || pos[t] / P >= max_pages)
      throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "token " + std::to_string(t) + ": slot " + std::to_string(slot[t]) + " position " +
                                                        std::to_string(pos[t]) + " is outside the page table [" + std::to_string(max_pages) +
                                                        " pages of " + std::to_string(P) + ", " + std::to_string(n_slots) + " slots]");
    const int32_t *row = table + slot[t] * max_pages;
    for (int64_t j = 0; j <= pos[t] / P; ++j)
      if (row[j] < 0 || row[j] >= n_pages)
        throw sdk::Error(MINFER_ERR_INVALID_ARGUMENT, "slot " + std::to_string(slot[t]) + ": page " + std::to_string(row[j]) +
                                                          " is outside the pool of " + std::to_string(n_pages));
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t at = (int64_t(table[slot[t] * max_pages + pos[t] / P]) * P + pos[t] % P) * kvd;
    for (int64_t i = 0; i < kvd; ++i) {
      if constexpr (sizeof(T) == 2) {
        kc[at + i] = sdk::float_to_half(k[t * kvd + i]);
        vc[at + i] = sdk::float_to_half(v[t * kvd + i]);
      } else {
        kc[at + i] = k[t * kvd + i];
        vc[at + i] = v[t * kvd + i];
      }
    }
  }
  const int64_t group = p.n_head / p.n_kv_head, window = sdk::attention_window(p);
  auto walk_of = [&](int64_t t) { return PageWalk{table + slot[t] * max_pages, P}; };
  auto span_of = [&](int64_t t) {
    return Span{window > 0 ? std::max<int64_t>(0, pos[t] - window + 1) : 0, pos[t], p.scale, sdk::attention_softcap(p)};
  };
  // Blocks of a slot's consecutive tokens (block_attention), paired early with late so each
  // thread's contiguous range of items gets about the same keys.
  std::vector<TokenBlock> blocks;
  for (int64_t t = 0; t < tokens; ++t) {
    TokenBlock *last = blocks.empty() ? nullptr : &blocks.back();
    if (last && last->nt < kBlockTokens && slot[t] == slot[last->t0] && pos[t] == pos[last->t0] + last->nt) ++last->nt;
    else blocks.push_back({t, 1});
  }
  const int64_t nblk = int64_t(blocks.size());
  auto block_of = [&](int64_t bi) { return blocks[size_t(bi % 2 == 0 ? bi / 2 : nblk - 1 - bi / 2)]; };
  const bool wide = ctx.isa >= Isa::Avx512Vnni && hd % 16 == 0, narrow = avx2_family(ctx.isa) && hd % 8 == 0;
  // Where the blocks x KV heads leave threads idle (a decode step of few sequences, and few KV
  // heads: Gemma 3's one, Qwen2's two), each item's keys go in `splits` shares of at least
  // kSplitKeys, each share's running max, sum and output kept apart, then merged in share
  // order. Without it a lone sequence's MQA decode attended on one thread.
  constexpr int64_t kSplitKeys = 512;
  const int64_t items = nblk * p.n_kv_head, threads = ctx.pool.size();
  int64_t longest = 0;
  for (const TokenBlock &b : blocks) longest = std::max<int64_t>(longest, pos[b.t0 + b.nt - 1] + 1);
  const int64_t splits = items >= threads ? 1 : std::max<int64_t>(1, std::min<int64_t>((threads + items - 1) / items, longest / kSplitKeys));
  const int64_t share = ((longest + splits - 1) / splits + kKeyTile - 1) / kKeyTile * kKeyTile;  // keys a share, whole tiles
  const int64_t pair_floats = hd + 2, per_item = kBlockTokens * group * pair_floats;
  thread_local std::vector<float> partial_buf;  // splits > 1: [item][share] = m, l of each pair, then acc[hd] of each
  if (splits > 1) partial_buf.resize(size_t(items * splits * per_item));
  float *const partial = partial_buf.data();  // the calling thread's buffer (a thread_local named in the workers would be theirs)
  ctx.pool.run(items * splits, [&](int64_t w0, int64_t w1, int) {
    Scratch &s = scratch();
    s.score.resize(size_t(2 * kBlockTokens * group));
    s.acc.resize(size_t(kBlockTokens * group * hd));
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t item = w / splits, c = w % splits;
      const TokenBlock b = block_of(item / p.n_kv_head);
      const int64_t kvh = item % p.n_kv_head;
      Span spans[kBlockTokens];
      for (int64_t i = 0; i < b.nt; ++i) spans[i] = span_of(b.t0 + i);
      BlockState st{s.score.data(), s.score.data() + kBlockTokens * group, s.acc.data()};
      if (splits > 1) {  // this share's state in the shared buffer: m, l, then acc of each pair
        float *base = partial + (item * splits + c) * per_item;
        st = {base, base + kBlockTokens * group, base + 2 * kBlockTokens * group};
      }
      const auto run = [&](auto tile) {
        block_attention<decltype(tile), T>(q, p.n_head, kvh * group, group, kc + kvh * hd, vc + kvh * hd, kvd, walk_of(b.t0), spans, b, hd, st,
                                           splits > 1 ? nullptr : out, c * share, c * share + share - 1);
      };
      if (wide) hd == 64 ? run(TileAvx512<64>{}) : hd == 128 ? run(TileAvx512<128>{}) : run(TileAvx512<0>{});
      else if (narrow) hd == 64 ? run(TileAvx2<64>{}) : hd == 128 ? run(TileAvx2<128>{}) : run(TileAvx2<0>{});
      else run(TileScalar{});
    }
  });
  if (splits == 1) return;
  ctx.pool.run(items, [&](int64_t w0, int64_t w1, int) {  // the shares merged: each weighed by exp(m_share - m)
    for (int64_t item = w0; item < w1; ++item) {
      const TokenBlock b = block_of(item / p.n_kv_head);
      const int64_t kvh = item % p.n_kv_head;
      for (int64_t pi = 0; pi < b.nt * group; ++pi) {
        const auto m_of = [&](int64_t c) { return partial[size_t((item * splits + c) * per_item + pi)]; };
        const auto l_of = [&](int64_t c) { return partial[size_t((item * splits + c) * per_item + kBlockTokens * group + pi)]; };
        const auto acc_of = [&](int64_t c) { return partial + (item * splits + c) * per_item + 2 * kBlockTokens * group + pi * hd; };
        float m = -INFINITY, l = 0;
        for (int64_t c = 0; c < splits; ++c) m = std::max(m, m_of(c));
        float *o = out + ((b.t0 + pi / group) * p.n_head + kvh * group + pi % group) * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t c = 0; c < splits; ++c) {
          if (m_of(c) == -INFINITY) continue;  // no keys of this token in the share
          const float wgt = std::exp(m_of(c) - m);
          l += l_of(c) * wgt;
          const float *a = acc_of(c);
          for (int64_t d = 0; d < hd; ++d) o[d] += a[d] * wgt;
        }
        for (int64_t d = 0; d < hd; ++d) o[d] /= l;
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
