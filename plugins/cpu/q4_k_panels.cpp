#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "panels.hpp"

namespace minfer::cpu {
namespace {

// A row's block into its panel block or back: d, dmin, the three scale words, then the 32
// 4-byte pieces of its quantized bytes.
void move_q4_k(minfer_block_q4_k &row, Q4_KPanel &pb, int r, bool to_panels) {
  if (to_panels) {
    pb.d[r] = row.d, pb.dmin[r] = row.dmin;
    for (int i = 0; i < 3; ++i) std::memcpy(&pb.scales[i][r], row.scales + 4 * i, 4);
    for (int g = 0; g < 4; ++g)
      for (int c = 0; c < 8; ++c) std::memcpy(pb.qs[g][c][r], row.qs + 32 * g + 4 * c, 4);
  } else {
    row.d = pb.d[r], row.dmin = pb.dmin[r];
    for (int i = 0; i < 3; ++i) std::memcpy(row.scales + 4 * i, &pb.scales[i][r], 4);
    for (int g = 0; g < 4; ++g)
      for (int c = 0; c < 8; ++c) std::memcpy(row.qs + 32 * g + 4 * c, pb.qs[g][c][r], 4);
  }
}

#define MINFER_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MINFER_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

// ---- Dot products straight from the panels ------------------------------------------------
// AVX-512: k4_dots_vnni (panels.hpp, shared with Q5_K). AVX2: the same sums on 8 rows at a
// time, 64 vpmaddubsw per (8 rows, 256 values, token), a sub-block summed in int16 (8 * 2 *
// 15 * 127 < 2^15); the scale words decode as the row dots' (qdot.cpp q4_k_scales_simd), 8
// rows at once: sc03 and m03 hold sub-blocks 0-3's six-bit fields a byte each, sc47 and m47
// those of 4-7.

// Eight rows' six-bit scales and minima of sub-blocks 0-3 (high false) or 4-7 (true), a byte
// each, from the panel's three scale words u0, u1, u2 (k4_scale_min's layout).
MINFER_AVX2 inline void k4_scale_words(__m256i u0, __m256i u1, __m256i u2, bool high, __m256i &sc, __m256i &mn) {
  const __m256i six = _mm256_set1_epi32(0x3f3f3f3f), four = _mm256_set1_epi32(0x0f0f0f0f), two = _mm256_set1_epi32(0x03030303);
  if (!high) {
    sc = _mm256_and_si256(u0, six), mn = _mm256_and_si256(u1, six);
  } else {
    sc = _mm256_or_si256(_mm256_and_si256(u2, four), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), two), 4));
    mn = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), four), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), two), 4));
  }
}

// The AVX2 pass and its AVX-VNNI twin (a macro: each needs its own target), DOT and WIDEN the
// steps of panels.hpp (AVX2: a sub-block summed in int16, then widened). One token (decode)
// takes both 8-row halves of a panel block at once, each 64-byte line of it read once and
// each activation word broadcast once for 16 rows, where two passes read the panel again from
// L2 (Xeon VM, isa avx2, alternating: 4096 x 262144 rows 17.8 -> 19.8 GB/s; the 30B-A3B slice's
// tg32 26.8 -> 28.1 t/s); more tokens keep the two passes (their sums fill the registers).
// Both sub-blocks' sums stay live here: one sub-block at a time with the pieces unrolled (what
// made the AVX-512 pass 24% faster) ran 5-8% slower at 4-128 tokens (Zen 5, isa avx2, five
// alternating rounds), the scale words spilling from the 16 registers instead.
#define MINFER_Q4_K_DOTS_256(NAME, TARGET, DOT, WIDEN)                                                                                               \
template <int T>                                                                                                                                     \
TARGET void NAME(const Q4_KPanel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {                                               \
  const __m256i low = _mm256_set1_epi8(0x0f), byte = _mm256_set1_epi32(0xff);                                                                     \
  if constexpr (T == 1) { /* one token: both 8-row halves in one pass, each panel line read once */                                                \
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};                                                                                      \
    for (int64_t b = 0; b < nb; ++b) {                                                                                                               \
      prefetch_panel_block(p + b, int(sizeof(Q4_KPanel)), 2 * int(sizeof(Q4_KPanel)));                                                               \
      for (int g = 0; g < 4; ++g) {                                                                                                                  \
        const ActBlock *x = a + b * 8 + 2 * g;                                                                                                       \
        __m256i p0[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}, p1[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};                 \
        for (int c = 0; c < 8; ++c) {                                                                                                                \
          const __m256i x0 = _mm256_set1_epi32(*reinterpret_cast<const int32_t *>(x[0].qs + 4 * c));                                                 \
          const __m256i x1 = _mm256_set1_epi32(*reinterpret_cast<const int32_t *>(x[1].qs + 4 * c));                                                 \
          for (int h = 0; h < 2; ++h) {                                                                                                              \
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].qs[g][c][8 * h]));                                           \
            p0[h] = DOT(p0[h], _mm256_and_si256(v, low), x0);                                                                                        \
            p1[h] = DOT(p1[h], _mm256_and_si256(_mm256_srli_epi16(v, 4), low), x1);                                                                  \
          }                                                                                                                                          \
        }                                                                                                                                            \
        const int sh0 = 16 * (g & 1), sh1 = sh0 + 8;                                                                                                 \
        for (int h = 0; h < 2; ++h) {                                                                                                                \
          const int r0 = 8 * h;                                                                                                                      \
          const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].scales[0] + r0));                                             \
          const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].scales[1] + r0));                                             \
          const __m256i u2 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].scales[2] + r0));                                             \
          __m256i scw, mw;                                                                                                                           \
          k4_scale_words(u0, u1, u2, g >= 2, scw, mw);                                                                                               \
          const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].d + r0)));                                         \
          const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].dmin + r0)));                                   \
          const __m256 sc0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(scw, sh0), byte));                                                \
          const __m256 sc1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(scw, sh1), byte));                                                \
          const __m256 m0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(mw, sh0), byte));                                                  \
          const __m256 m1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(mw, sh1), byte));                                                  \
          acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(WIDEN(p0[h])), _mm256_mul_ps(_mm256_mul_ps(d, sc0), _mm256_set1_ps(x[0].d)), acc[h]);          \
          acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(WIDEN(p1[h])), _mm256_mul_ps(_mm256_mul_ps(d, sc1), _mm256_set1_ps(x[1].d)), acc[h]);          \
          acc[h] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, m0), _mm256_set1_ps(x[0].d_sum), acc[h]);                                                    \
          acc[h] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, m1), _mm256_set1_ps(x[1].d_sum), acc[h]);                                                    \
        }                                                                                                                                            \
      }                                                                                                                                              \
    }                                                                                                                                                \
    _mm256_storeu_ps(y, acc[0]), _mm256_storeu_ps(y + 8, acc[1]);                                                                                    \
    return;                                                                                                                                          \
  }                                                                                                                                                  \
  for (int half = 0; half < 2; ++half) { /* 8 rows at a time; the second pass reads the panel from L2 */                                             \
    __m256 acc[T];                                                                                                                                   \
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();                                                                                        \
    for (int64_t b = 0; b < nb; ++b) {                                                                                                               \
      if (half == 0)                                                                                                                                 \
        prefetch_panel_block(p + b, int(sizeof(Q4_KPanel)), 2 * int(sizeof(Q4_KPanel)));                                                             \
      const int r0 = 8 * half;                                                                                                                       \
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].d + r0)));                                             \
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].dmin + r0)));                                       \
      const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].scales[0] + r0));                                                 \
      const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].scales[1] + r0));                                                 \
      const __m256i u2 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].scales[2] + r0));                                                 \
      __m256i sc03, m03, sc47, m47;                                                                                                                  \
      k4_scale_words(u0, u1, u2, false, sc03, m03);                                                                                                  \
      k4_scale_words(u0, u1, u2, true, sc47, m47);                                                                                                   \
      for (int g = 0; g < 4; ++g) {                                                                                                                  \
        __m256i p0[T], p1[T];                                                                                                                        \
        for (int t = 0; t < T; ++t) p0[t] = p1[t] = _mm256_setzero_si256();                                                                          \
        for (int c = 0; c < 8; ++c) {                                                                                                                \
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].qs[g][c][r0]));                                                \
          const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);                                          \
          for (int t = 0; t < T; ++t) {                                                                                                              \
            const ActBlock *x = a + t * kb + b * 8 + 2 * g;                                                                                          \
            p0[t] = DOT(p0[t], lo, _mm256_set1_epi32(*reinterpret_cast<const int32_t *>(x[0].qs + 4 * c)));                                          \
            p1[t] = DOT(p1[t], hi, _mm256_set1_epi32(*reinterpret_cast<const int32_t *>(x[1].qs + 4 * c)));                                          \
          }                                                                                                                                          \
        }                                                                                                                                            \
        const __m256i scw = g < 2 ? sc03 : sc47, mw = g < 2 ? m03 : m47;                                                                             \
        const int sh0 = 16 * (g & 1), sh1 = sh0 + 8;                                                                                                 \
        const __m256 dsc0 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(scw, sh0), byte)));                               \
        const __m256 dsc1 = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(scw, sh1), byte)));                               \
        const __m256 dm0 = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(mw, sh0), byte)));                              \
        const __m256 dm1 = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(mw, sh1), byte)));                              \
        for (int t = 0; t < T; ++t) {                                                                                                                \
          const ActBlock *x = a + t * kb + b * 8 + 2 * g;                                                                                            \
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(WIDEN(p0[t])), _mm256_mul_ps(dsc0, _mm256_set1_ps(x[0].d)), acc[t]);                           \
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(WIDEN(p1[t])), _mm256_mul_ps(dsc1, _mm256_set1_ps(x[1].d)), acc[t]);                           \
          acc[t] = _mm256_fnmadd_ps(dm0, _mm256_set1_ps(x[0].d_sum), acc[t]);                                                                        \
          acc[t] = _mm256_fnmadd_ps(dm1, _mm256_set1_ps(x[1].d_sum), acc[t]);                                                                        \
        }                                                                                                                                            \
      }                                                                                                                                              \
    }                                                                                                                                                \
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * m + 8 * half, acc[t]);                                                                      \
  }                                                                                                                                                  \
}
MINFER_Q4_K_DOTS_256(q4_k_dots_avx2, MINFER_AVX2, dot_step_avx2, widen_i16)
MINFER_Q4_K_DOTS_256(q4_k_dots_avxvnni, MINFER_AVXVNNI, dot_step_avxvnni, widen_i32)
#undef MINFER_Q4_K_DOTS_256

// Tokens per AVX2 pass: two int16 sums and an accumulator of 8 rows a token in 16 registers
// (AVX-512: kVnniPanelTokens).
constexpr int kAvx2Tokens = 4;

}  // namespace

void q4_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  const auto *pb = reinterpret_cast<const Q4_KPanel *>(panel);
  const int64_t nb = k / 256, kb = k / 32;
  if (isa == Isa::Avx512Vnni)
    return in_passes<kVnniPanelTokens>(tokens, [&](auto tag, int64_t t0) { k4_dots_vnni<Q4_KPanel, decltype(tag)::value>(pb, nb, a + t0 * kb, kb, y + t0 * m, m); });
  if (isa == Isa::AvxVnni)
    return in_passes<kAvx2Tokens>(tokens, [&](auto tag, int64_t t0) { q4_k_dots_avxvnni<decltype(tag)::value>(pb, nb, a + t0 * kb, kb, y + t0 * m, m); });
  in_passes<kAvx2Tokens>(tokens, [&](auto tag, int64_t t0) { q4_k_dots_avx2<decltype(tag)::value>(pb, nb, a + t0 * kb, kb, y + t0 * m, m); });
}

void q4_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q4_k, Q4_KPanel, 256>(panel, k, rows, move_q4_k); }

void q4_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q4_k, Q4_KPanel, 256>(w, k, m, to_panels, pool, move_q4_k);
}

}  // namespace minfer::cpu
