#include "amx_matmul.hpp"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "decode_row.hpp"
#include "panels.hpp"
#include "minfer/blocks.h"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

constexpr int kTile = 16;  // weight rows per panel = tokens per token tile = f32 lanes of a row
constexpr int kStep = 32;  // k per tile product: 16 rows of 64 bytes hold 32 bf16 each
constexpr int kTileWords = kTile * kStep / 2;  // one tile of bf16 pairs, as 32-bit words

#define MINFER_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

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
    else decode_row_f32(dtype, row, row_f32, k);
    for (int64_t s = 0; s < steps; ++s)
      _mm512_storeu_si512(dst + s * kTileWords, to_bf16_pairs(_mm512_loadu_ps(row_f32 + s * kStep), _mm512_loadu_ps(row_f32 + s * kStep + 16)));
  }
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

// Two weight panels x two token tiles: out[pp][tt][n][t] = sum over k of panel pp's row n and
// token t of tile tt, accumulated in tiles 0-3 over all steps. Meanwhile asks for the lines
// [prefetch, prefetch + steps * prefetch_step) into L2: the next panels' weights arrive
// while the tiles work (the decode of a panel otherwise waits on memory).
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
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
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
  return tile && bf16 && avx512_bf16 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
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
  const int64_t steps = k / kStep, tile_words = steps * kTileWords;
  const int64_t token_tiles = (tokens + kTile - 1) / kTile, panels = (m + kTile - 1) / kTile;
  // The tokens in tile order once per call (an even count of tiles: they go in pairs), in the
  // calling thread's buffer; the workers only read it.
  thread_local std::vector<int32_t> token_q;
  const int64_t padded_tiles = token_tiles + token_tiles % 2;
  token_q.resize(size_t(padded_tiles * tile_words));
  int32_t *tq = token_q.data();
  pool.run(padded_tiles, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i)
      pack_token_tile(x + i * kTile * k, k, int(std::clamp<int64_t>(tokens - i * kTile, 0, kTile)), tq + i * tile_words);
  });
  // Threads split the weight panels in pairs: each pair is decoded once and met by every
  // token tile.
  pool.run((panels + 1) / 2, [&](int64_t p0, int64_t p1, int) {
    thread_local std::vector<int32_t> panel_q;
    thread_local std::vector<float> row_f32;
    thread_local std::vector<uint8_t> rows_of_panel;  // w_in_panels: the panel being decoded, as rows
    panel_q.resize(size_t(2 * tile_words));
    row_f32.resize(size_t(k));
    if (w_in_panels) rows_of_panel.resize(size_t(kTile * row_bytes));
    alignas(64) float out[4 * kTile * kTile];
    configure_tiles();
    for (int64_t p = p0; p < p1; ++p) {
      int rows[2];
      for (int h = 0; h < 2; ++h) {
        rows[h] = int(std::clamp<int64_t>(m - (2 * p + h) * kTile, 0, kTile));
        const uint8_t *src = w + (2 * p + h) * kTile * row_bytes;
        if (w_in_panels && rows[h] > 0) {  // whole panels: m is a multiple of 16 there
          panel_rows(dtype, src, k, rows_of_panel.data());
          src = rows_of_panel.data();
        }
        pack_weight_panel(dtype, src, row_bytes, rows[h], k, panel_q.data() + h * tile_words, row_f32.data());
      }
      // The next pair's weights, spread over this pair's tile products.
      const char *next = reinterpret_cast<const char *>(w + (2 * p + 2) * kTile * row_bytes);
      const int64_t next_bytes = p + 1 < p1 ? std::min<int64_t>(2 * kTile, m - (2 * p + 2) * kTile) * row_bytes : 0;
      const int64_t per_step = (next_bytes / (steps * ((token_tiles + 1) / 2)) + 64) & ~int64_t(63);
      for (int64_t i = 0; i < token_tiles; i += 2) {
        panels_times_tokens(panel_q.data(), panel_q.data() + tile_words, tq + i * tile_words, tq + (i + 1) * tile_words, steps, out,
                            next + (i / 2) * steps * per_step, next_bytes ? per_step : 0);
        for (int h = 0; h < 2; ++h)
          for (int tt = 0; tt < 2; ++tt) {
            const int64_t t0 = (i + tt) * kTile, nt = std::clamp<int64_t>(tokens - t0, 0, kTile);
            write_transposed(out + (h * 2 + tt) * kTile * kTile, int(nt), rows[h], y + t0 * m + (2 * p + h) * kTile, m);
          }
      }
    }
    release_tiles();
  });
}

}  // namespace minfer::cpu
