#include "amx_matmul.hpp"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "block_bits.hpp"
#include "decode_row.hpp"
#include "panels.hpp"
#include "minfer/blocks.h"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

constexpr int kTile = 16;  // weight rows per panel = tokens per token tile = f32 lanes of a row
constexpr int kStep = 32;  // k per tile product: 16 rows of 64 bytes hold 32 bf16 each
constexpr int kTileWords = kTile * kStep / 2;  // one tile of bf16 pairs, as 32-bit words

#define MINFER_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx512vbmi,avx2,fma,f16c")))

// ldtilecfg's 64-byte operand; every tile here is 16 rows x 64 bytes.
struct TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
constexpr TileConfig tile_config() {
  TileConfig c{};
  c.palette = 1;
  for (int t = 0; t < 8; ++t) c.rows[t] = kTile, c.colsb[t] = 64;
  return c;
}
// A constant in memory: GCC 12 does not see ldtilecfg read its operand and drops stores to a
// local one.
alignas(64) constexpr TileConfig kTileConfig = tile_config();

// 32 f32 to bf16 (round to nearest even) as 16 words of pairs: word r = (v[2r], v[2r+1]).
MINFER_AMX inline __m512i to_bf16_pairs(__m512 lo, __m512 hi) { return __m512i(_mm512_cvtne2ps_pbh(hi, lo)); }

// Rows of the types Q4_K_M files are made of (Q4_K, Q6_K, and Q5_0 where a row is not a
// multiple of 256), decoded to f32 with AVX-512: the SDK's per-value decoders cost more than
// the tile products.
MINFER_AMX void decode_q5_0_row(const minfer_block_q5_0 *b, int64_t nb, float *out) {
  const __m128i nib = _mm_set1_epi8(0x0f), sixteen = _mm_set1_epi8(16);
  for (int64_t i = 0; i < nb; ++i) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b[i].qs));
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    // Values j and j + 16 share byte j's nibbles; bit j of qh is value j's fifth bit. Offset 16.
    __m128i lo = _mm_and_si128(packed, nib), hi = _mm_and_si128(_mm_srli_epi16(packed, 4), nib);
    lo = _mm_sub_epi8(_mm_mask_add_epi8(lo, __mmask16(qh & 0xffff), lo, sixteen), sixteen);
    hi = _mm_sub_epi8(_mm_mask_add_epi8(hi, __mmask16(qh >> 16), hi, sixteen), sixteen);
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
    _mm512_storeu_ps(out + 32 * i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
    _mm512_storeu_ps(out + 32 * i + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
  }
}

MINFER_AMX void decode_q6_k_row(const minfer_block_q6_k *b, int64_t nb, float *out) {
  const __m256i nib = _mm256_set1_epi8(0x0f), two_bits = _mm256_set1_epi8(0x30), offset = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = _cvtsh_ss(b[i].d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t *ql = b[i].ql + 64 * half, *qh = b[i].qh + 32 * half;
      const int8_t *sc = b[i].scales + 8 * half;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qh));
      // Four runs of 32 values: low/high nibbles of ql[0..31] and ql[32..63], each with two
      // bits of qh[0..31] on top (bits 0-1, 2-3, 4-5, 6-7), minus 32.
      const __m256i q[4] = {
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, nib), _mm256_and_si256(_mm256_slli_epi16(h, 4), two_bits)), offset),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, nib), _mm256_and_si256(_mm256_slli_epi16(h, 2), two_bits)), offset),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), nib), _mm256_and_si256(h, two_bits)), offset),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), nib), _mm256_and_si256(_mm256_srli_epi16(h, 2), two_bits)),
                          offset)};
      float *y = out + 256 * i + 128 * half;
      for (int g = 0; g < 4; ++g) {  // values 0-15 of a run take scale 2g, 16-31 scale 2g + 1
        const __m512 s0 = _mm512_set1_ps(d * float(sc[2 * g])), s1 = _mm512_set1_ps(d * float(sc[2 * g + 1]));
        _mm512_storeu_ps(y + 32 * g, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q[g]))), s0));
        _mm512_storeu_ps(y + 32 * g + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q[g], 1))), s1));
      }
    }
  }
}

// Q4_K (real Q4_K_M files' main type where rows are multiples of 256).
MINFER_AMX void decode_q4_k_row(const minfer_block_q4_k *b, int64_t nb, float *out) {
  const __m256i nib = _mm256_set1_epi8(0x0f);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin);
    for (int g = 0; g < 4; ++g) {  // 64 values: 32 low nibbles (sub-block 2g), 32 high (2g + 1)
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b[i].qs + 32 * g));
      const __m256i halves[2] = {_mm256_and_si256(q, nib), _mm256_and_si256(_mm256_srli_epi16(q, 4), nib)};
      for (int h = 0; h < 2; ++h) {
        int sc, m;
        sdk::k4_scale_min(b[i].scales, 2 * g + h, sc, m);
        const __m512 scale = _mm512_set1_ps(d * float(sc)), min = _mm512_set1_ps(dmin * float(m));
        float *y = out + 256 * i + 64 * g + 32 * h;
        _mm512_storeu_ps(y, _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(halves[h]))), scale, min));
        _mm512_storeu_ps(y + 16,
                         _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(halves[h], 1))), scale, min));
      }
    }
  }
}

// IQ4_NL and IQ4_XS rows: each 32 values' indices to the table's values by one vpshufb
// (block_bits.hpp), times the block's d (IQ4_XS: times the sub-block's scale).
MINFER_AMX void decode_iq4_row(int32_t dtype, const uint8_t *row, int64_t k, float *out) {
  for (int64_t g = 0; g < k / 32; ++g) {
    const uint8_t *qs;
    float d;
    if (dtype == MINFER_DTYPE_IQ4_NL) {
      const auto &b = reinterpret_cast<const minfer_block_iq4_nl *>(row)[g];
      qs = b.qs, d = _cvtsh_ss(b.d);
    } else {
      const auto &b = reinterpret_cast<const minfer_block_iq4_xs *>(row)[g / 8];
      qs = b.qs + 16 * (g % 8), d = _cvtsh_ss(b.d) * float(sdk::iq4_xs_scale(b, int(g % 8)));
    }
    const __m256i v = iq4_values32(qs);  // values 0-15, then 16-31
    const __m512 scale = _mm512_set1_ps(d);
    _mm512_storeu_ps(out + 32 * g, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(v))), scale));
    _mm512_storeu_ps(out + 32 * g + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(v, 1))), scale));
  }
}

// Up to 16 weight rows decoded to bf16, k-step-major: step s of row r at q[(s * 16 + r) * 16]
// (words), so each step's 16 x 32 tile is 1 KiB contiguous. Rows past the end are zero.
MINFER_AMX void pack_weight_panel(int32_t dtype, const uint8_t *w, int64_t row_bytes, int rows, int64_t k, int32_t *q, float *row_f32) {
  const int64_t steps = k / kStep;
  for (int r = 0; r < kTile; ++r) {
    int32_t *dst = q + r * kStep / 2;
    if (r >= rows) {
      for (int64_t s = 0; s < steps; ++s) _mm512_storeu_si512(dst + s * kTileWords, _mm512_setzero_si512());
      continue;
    }
    const uint8_t *row = w + r * row_bytes;
    if (dtype == MINFER_DTYPE_Q4_0 || dtype == MINFER_DTYPE_Q8_0) {
      for (int64_t s = 0; s < steps; ++s) {  // one block per step: the common types, inline
        __m512i lo, hi;
        float d;
        if (dtype == MINFER_DTYPE_Q4_0) {
          const auto &b = reinterpret_cast<const minfer_block_q4_0 *>(row)[s];
          const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b.qs));  // values j and j + 16 share byte j
          const __m128i eight = _mm_set1_epi8(8), nib = _mm_set1_epi8(0x0f);
          lo = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(packed, nib), eight));
          hi = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), nib), eight));
          d = _cvtsh_ss(b.d);
        } else {
          const auto &b = reinterpret_cast<const minfer_block_q8_0 *>(row)[s];
          lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b.qs)));
          hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b.qs + 16)));
          d = _cvtsh_ss(b.d);
        }
        const __m512 scale = _mm512_set1_ps(d);
        _mm512_storeu_si512(dst + s * kTileWords,
                            to_bf16_pairs(_mm512_mul_ps(_mm512_cvtepi32_ps(lo), scale), _mm512_mul_ps(_mm512_cvtepi32_ps(hi), scale)));
      }
      continue;
    }
    // Every other block type: through f32.
    if (dtype == MINFER_DTYPE_Q5_0) decode_q5_0_row(reinterpret_cast<const minfer_block_q5_0 *>(row), k / 32, row_f32);
    else if (dtype == MINFER_DTYPE_Q6_K) decode_q6_k_row(reinterpret_cast<const minfer_block_q6_k *>(row), k / 256, row_f32);
    else if (dtype == MINFER_DTYPE_Q4_K) decode_q4_k_row(reinterpret_cast<const minfer_block_q4_k *>(row), k / 256, row_f32);
    else if (dtype == MINFER_DTYPE_IQ4_NL || dtype == MINFER_DTYPE_IQ4_XS) decode_iq4_row(dtype, row, k, row_f32);
    else decode_row_f32(dtype, row, row_f32, k);
    for (int64_t s = 0; s < steps; ++s)
      _mm512_storeu_si512(dst + s * kTileWords, to_bf16_pairs(_mm512_loadu_ps(row_f32 + s * kStep), _mm512_loadu_ps(row_f32 + s * kStep + 16)));
  }
}

// ---- Weights held in panels, decoded straight into the tile product's second operand ----
// Panels keep 16 rows' same 4 values side by side ([row][4] in 64 bytes), which is the
// layout of the tile product's B operand: row j of a B tile holds pair j (k = 2j, 2j + 1) of
// 16 columns. So there the weights are B (columns = weight rows) and the tokens A (rows =
// tokens, their values in order): no turning panels back into rows, no f32 row in between,
// and the tokens and outputs stay in row order (no scatter, no transposed write).
// Q4_0, Q4_K and Q6_K (what Q4_0 and Q4_K_M files are made of) have such decoders; the
// other panel types go back to rows (panel_rows).
bool panel_decodes_to_b(int32_t dtype) {
  return dtype == MINFER_DTYPE_Q4_0 || dtype == MINFER_DTYPE_Q4_K || dtype == MINFER_DTYPE_Q6_K;
}

// A per-row vector (16 lanes) spread over the pairs of rows 0-7 and of rows 8-15.
MINFER_AMX inline void row_pairs(__m512 v, __m512 &lo, __m512 &hi) {
  const __m512i i_lo = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  lo = _mm512_permutexvar_ps(i_lo, v);
  hi = _mm512_permutexvar_ps(_mm512_add_epi32(i_lo, _mm512_set1_epi32(8)), v);
}

// Per-row scale (s) and offset (o, kOffset) spread over pairs (row_pairs).
struct PairScales {
  __m512 s_lo, s_hi, o_lo, o_hi;
};
template <bool kOffset>
MINFER_AMX inline PairScales pair_scales(__m512 s, __m512 o) {
  PairScales p;
  row_pairs(s, p.s_lo, p.s_hi);
  if constexpr (kOffset) row_pairs(o, p.o_lo, p.o_hi);
  return p;
}

// One B row: the int8 pairs of rows 0-7 and of rows 8-15, scaled (PairScales), in bf16.
template <bool kOffset>
MINFER_AMX inline void pairs_to_b(__m128i rows0_7, __m128i rows8_15, const PairScales &p, int32_t *at) {
  __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(rows0_7)), hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(rows8_15));
  if constexpr (kOffset) {
    lo = _mm512_fmsub_ps(lo, p.s_lo, p.o_lo);
    hi = _mm512_fmsub_ps(hi, p.s_hi, p.o_hi);
  } else {
    lo = _mm512_mul_ps(lo, p.s_lo);
    hi = _mm512_mul_ps(hi, p.s_hi);
  }
  _mm512_storeu_si512(at, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
}

// 16 rows' 4 int8 values ([row][4], a panel's piece) times their row's scale (minus its
// offset) as B rows j (pairs v0 v1) and j + 1 (v2 v3) at dst and dst + 16 words.
template <bool kOffset>
MINFER_AMX inline void four_values_to_b(__m512i v, const PairScales &p, int32_t *dst) {
  // Bytes 0-31: (v0, v1) of rows 0..15; 32-63: (v2, v3).
  const __m512i order = _mm512_set_epi8(63, 62, 59, 58, 55, 54, 51, 50, 47, 46, 43, 42, 39, 38, 35, 34, 31, 30, 27, 26, 23, 22, 19, 18, 15, 14,
                                        11, 10, 7, 6, 3, 2, 61, 60, 57, 56, 53, 52, 49, 48, 45, 44, 41, 40, 37, 36, 33, 32, 29, 28, 25, 24,
                                        21, 20, 17, 16, 13, 12, 9, 8, 5, 4, 1, 0);
  const __m512i w = _mm512_permutexvar_epi8(order, v);
  pairs_to_b<kOffset>(_mm512_extracti32x4_epi32(w, 0), _mm512_extracti32x4_epi32(w, 1), p, dst);
  pairs_to_b<kOffset>(_mm512_extracti32x4_epi32(w, 2), _mm512_extracti32x4_epi32(w, 3), p, dst + 16);
}

// A panel's k values as B tiles: step s at q + s * kTileWords, word 16j + r = row r's values
// 32s + 2j and 32s + 2j + 1 in bf16.
MINFER_AMX void q4_0_panel_to_b(const Q4_0Panel *p, int64_t nb, int32_t *q) {
  const __m512i nib = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
  for (int64_t b = 0; b < nb; ++b) {  // a 32-value block is a step
    const PairScales sc = pair_scales<false>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d))), __m512());
    int32_t *tile = q + b * kTileWords;
    for (int c = 0; c < 4; ++c) {  // low nibbles: values 4c..4c+3, high: 16 + 4c..
      const __m512i v = _mm512_loadu_si512(p[b].qs[c]);
      four_values_to_b<false>(_mm512_sub_epi8(_mm512_and_si512(v, nib), eight), sc, tile + 16 * (2 * c));
      four_values_to_b<false>(_mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), nib), eight), sc, tile + 16 * (8 + 2 * c));
    }
  }
}

MINFER_AMX void q4_k_panel_to_b(const Q4_KPanel *p, int64_t nb, int32_t *q) {
  const __m512i nib = _mm512_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].dmin)));
    for (int g = 0; g < 4; ++g) {  // sub-blocks 2g (low nibbles) and 2g + 1 (high): steps 8b + 2g, + 1
      __m512 dsc[2], dm[2];
      k4_scales_16(p[b].scales, d, dmin, g, dsc, dm);
      const PairScales lo_sc = pair_scales<true>(dsc[0], dm[0]), hi_sc = pair_scales<true>(dsc[1], dm[1]);
      int32_t *tile = q + (8 * b + 2 * g) * kTileWords;
      for (int c = 0; c < 8; ++c) {
        const __m512i v = _mm512_loadu_si512(p[b].qs[g][c]);
        four_values_to_b<true>(_mm512_and_si512(v, nib), lo_sc, tile + 16 * (2 * c));
        four_values_to_b<true>(_mm512_and_si512(_mm512_srli_epi16(v, 4), nib), hi_sc, tile + kTileWords + 16 * (2 * c));
      }
    }
  }
}

MINFER_AMX void q6_k_panel_to_b(const Q6_KPanel *p, int64_t nb, int32_t *q) {
  const __m512i nib = _mm512_set1_epi8(0x0f), two_bits = _mm512_set1_epi8(0x30), offset = _mm512_set1_epi8(32);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    PairScales sc[16];  // sub-block i (16 values): d * scale
    for (int i = 0; i < 16; ++i)
      sc[i] = pair_scales<false>(
          _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].scales[i]))))), __m512());
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 8; ++c) {
        // Values 128h + 32q' + 4c..+3 for q' = 0..3 (step 8b + 4h + q'): the low or high
        // nibbles of ql[h][q' % 2] with two bits of qh on top, minus 32 (as decode_q6_k_row).
        const __m512i l0 = _mm512_loadu_si512(p[b].ql[h][0][c]), l1 = _mm512_loadu_si512(p[b].ql[h][1][c]);
        const __m512i hb = _mm512_loadu_si512(p[b].qh[h][c]);
        const __m512i v[4] = {
            _mm512_or_si512(_mm512_and_si512(l0, nib), _mm512_and_si512(_mm512_slli_epi16(hb, 4), two_bits)),
            _mm512_or_si512(_mm512_and_si512(l1, nib), _mm512_and_si512(_mm512_slli_epi16(hb, 2), two_bits)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), nib), _mm512_and_si512(hb, two_bits)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), nib), _mm512_and_si512(_mm512_srli_epi16(hb, 2), two_bits))};
        for (int qq = 0; qq < 4; ++qq)
          four_values_to_b<false>(_mm512_sub_epi8(v[qq], offset), sc[8 * h + 2 * qq + c / 4],
                                  q + (8 * b + 4 * h + qq) * kTileWords + 16 * (2 * c));
      }
  }
}

MINFER_AMX void panel_to_b(int32_t dtype, const uint8_t *panel, int64_t k, int32_t *q) {
  if (dtype == MINFER_DTYPE_Q4_0) q4_0_panel_to_b(reinterpret_cast<const Q4_0Panel *>(panel), k / 32, q);
  else if (dtype == MINFER_DTYPE_Q4_K) q4_k_panel_to_b(reinterpret_cast<const Q4_KPanel *>(panel), k / 256, q);
  else q6_k_panel_to_b(reinterpret_cast<const Q6_KPanel *>(panel), k / 256, q);
}

// Up to 16 tokens as A tiles (weights as B): step s holds token t's values 32s..32s+31 in
// bf16 at row t. Tokens past the end are zero.
MINFER_AMX void pack_token_rows(const float *x, int64_t k, int tokens, int32_t *q) {
  const int64_t steps = k / kStep;
  for (int t = 0; t < kTile; ++t)
    for (int64_t s = 0; s < steps; ++s)
      _mm512_storeu_si512(q + s * kTileWords + t * 16, t < tokens ? to_bf16_pairs(_mm512_loadu_ps(x + t * k + s * kStep),
                                                                                  _mm512_loadu_ps(x + t * k + s * kStep + 16))
                                                                  : _mm512_setzero_si512());
}

// y[t * m + n] = out[t][n] for t < tokens (weights as B: the tile's rows are tokens).
MINFER_AMX void write_rows(const float *out, int tokens, float *y, int64_t m) {
  for (int t = 0; t < tokens; ++t) _mm512_storeu_ps(y + t * m, _mm512_loadu_ps(out + t * kTile));
}

// Up to 16 tokens in the order the tile product wants: step s holds 16 rows of pairs, row r =
// (x[t][32s + 2r], x[t][32s + 2r + 1]) for t = 0..15. Tokens past the end are zero.
MINFER_AMX void pack_token_tile(const float *x, int64_t k, int tokens, int32_t *q) {
  const int64_t steps = k / kStep;
  const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(kTile));
  for (int t = 0; t < kTile; ++t)
    for (int64_t s = 0; s < steps; ++s) {
      const __m512i pairs =
          t < tokens ? to_bf16_pairs(_mm512_loadu_ps(x + t * k + s * kStep), _mm512_loadu_ps(x + t * k + s * kStep + 16)) : _mm512_setzero_si512();
      _mm512_i32scatter_epi32(q + s * kTileWords + t, rows, pairs, 4);
    }
}

// Two weight panels x two token tiles: out[pp][tt][n][t] (kWeightsB: [t][n]) = sum over k of
// panel pp's row n and token t of tile tt, accumulated in tiles 0-3 over all steps. Meanwhile
// asks for the lines [prefetch, prefetch + steps * prefetch_step) into L2: the next panels'
// weights arrive while the tiles work (the decode of a panel otherwise waits on memory).
template <bool kWeightsB>
MINFER_AMX void panels_times_tokens(const int32_t *w0, const int32_t *w1, const int32_t *x0, const int32_t *x1, int64_t steps, float *out,
                                    const char *prefetch, int64_t prefetch_step) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, w0 + s * kTileWords, 64);
    _tile_loadd(5, w1 + s * kTileWords, 64);
    _tile_loadd(6, x0 + s * kTileWords, 64);
    _tile_loadd(7, x1 + s * kTileWords, 64);
    if constexpr (kWeightsB) {  // out[pp][tt][t][n]
      _tile_dpbf16ps(0, 6, 4);
      _tile_dpbf16ps(1, 7, 4);
      _tile_dpbf16ps(2, 6, 5);
      _tile_dpbf16ps(3, 7, 5);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    for (int64_t b = 0; b < prefetch_step; b += 64) _mm_prefetch(prefetch + s * prefetch_step + b, _MM_HINT_T1);
  }
  _tile_stored(0, out + 0 * kTile * kTile, 64);
  _tile_stored(1, out + 1 * kTile * kTile, 64);
  _tile_stored(2, out + 2 * kTile * kTile, 64);
  _tile_stored(3, out + 3 * kTile * kTile, 64);
}

// y[t * m + n] = out[n][t] for t < tokens, n < rows: the tile's columns are tokens.
MINFER_AMX void write_transposed(const float *out, int tokens, int rows, float *y, int64_t m) {
  const __m512i column = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(kTile));
  const __mmask16 valid = __mmask16((1u << rows) - 1);
  for (int t = 0; t < tokens; ++t)
    _mm512_mask_storeu_ps(y + t * m, valid, _mm512_i32gather_ps(_mm512_add_epi32(column, _mm512_set1_epi32(t)), out, 4));
}

MINFER_AMX void configure_tiles() { _tile_loadconfig(&kTileConfig); }
MINFER_AMX void release_tiles() { _tile_release(); }

bool cpu_has_amx_bf16() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = d & (1u << 24), bf16 = d & (1u << 22);
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  const bool avx512_bf16 = a & (1u << 5);
  return tile && bf16 && avx512_bf16 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vbmi");
}

}  // namespace

bool amx_available() {
  // Linux keeps the 8 KiB tile state off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM
  // for XTILEDATA); the grant covers every thread of the process.
  static const bool yes = [] {
    constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return cpu_has_amx_bf16() && syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return yes;
}

void amx_matmul(int32_t dtype, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t m, const float *x, int64_t tokens, float *y,
                ThreadPool &pool, bool w_in_panels) {
  const bool weights_b = w_in_panels && panel_decodes_to_b(dtype);
  const int64_t steps = k / kStep, tile_words = steps * kTileWords;
  const int64_t token_tiles = (tokens + kTile - 1) / kTile, panels = (m + kTile - 1) / kTile;
  // The tokens in tile order once per call (an even count of tiles: they go in pairs), in the
  // calling thread's buffer; the workers only read it.
  thread_local std::vector<int32_t> token_q;
  const int64_t padded_tiles = token_tiles + token_tiles % 2;
  token_q.resize(size_t(padded_tiles * tile_words));
  int32_t *tq = token_q.data();
  pool.run(padded_tiles, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      const int n = int(std::clamp<int64_t>(tokens - i * kTile, 0, kTile));
      if (weights_b) pack_token_rows(x + i * kTile * k, k, n, tq + i * tile_words);
      else pack_token_tile(x + i * kTile * k, k, n, tq + i * tile_words);
    }
  });
  // Threads split the weight panels in pairs: each pair is decoded once and met by every
  // token tile.
  pool.run((panels + 1) / 2, [&](int64_t p0, int64_t p1, int) {
    thread_local std::vector<int32_t> panel_q;
    thread_local std::vector<float> row_f32;
    thread_local std::vector<uint8_t> rows_of_panel;  // panels without a B decoder: the panel being decoded, as rows
    panel_q.resize(size_t(2 * tile_words));
    row_f32.resize(size_t(k));
    if (w_in_panels && !weights_b) rows_of_panel.resize(size_t(kTile * row_bytes));
    alignas(64) float out[4 * kTile * kTile];
    configure_tiles();
    for (int64_t p = p0; p < p1; ++p) {
      int rows[2];
      for (int h = 0; h < 2; ++h) {
        rows[h] = int(std::clamp<int64_t>(m - (2 * p + h) * kTile, 0, kTile));
        const uint8_t *src = w + (2 * p + h) * kTile * row_bytes;
        int32_t *dst = panel_q.data() + h * tile_words;
        if (weights_b) {  // whole panels (m is a multiple of 16 there); a missing second one is zero
          if (rows[h] > 0) panel_to_b(dtype, src, k, dst);
          else std::memset(dst, 0, size_t(tile_words) * sizeof(int32_t));
          continue;
        }
        if (w_in_panels && rows[h] > 0) {
          panel_rows(dtype, src, k, rows_of_panel.data());
          src = rows_of_panel.data();
        }
        pack_weight_panel(dtype, src, row_bytes, rows[h], k, dst, row_f32.data());
      }
      // The next pair's weights, spread over this pair's tile products.
      const char *next = reinterpret_cast<const char *>(w + (2 * p + 2) * kTile * row_bytes);
      const int64_t next_bytes = p + 1 < p1 ? std::min<int64_t>(2 * kTile, m - (2 * p + 2) * kTile) * row_bytes : 0;
      const int64_t per_step = (next_bytes / (steps * ((token_tiles + 1) / 2)) + 64) & ~int64_t(63);
      for (int64_t i = 0; i < token_tiles; i += 2) {
        const auto product = weights_b ? panels_times_tokens<true> : panels_times_tokens<false>;
        product(panel_q.data(), panel_q.data() + tile_words, tq + i * tile_words, tq + (i + 1) * tile_words, steps, out,
                next + (i / 2) * steps * per_step, next_bytes ? per_step : 0);
        for (int h = 0; h < 2; ++h)
          for (int tt = 0; tt < 2; ++tt) {
            const int64_t t0 = (i + tt) * kTile, nt = std::clamp<int64_t>(tokens - t0, 0, kTile);
            float *at = y + t0 * m + (2 * p + h) * kTile;
            if (weights_b && rows[h] > 0) write_rows(out + (h * 2 + tt) * kTile * kTile, int(nt), at, m);
            else if (!weights_b) write_transposed(out + (h * 2 + tt) * kTile * kTile, int(nt), rows[h], at, m);
          }
      }
    }
    release_tiles();
  });
}

}  // namespace minfer::cpu
