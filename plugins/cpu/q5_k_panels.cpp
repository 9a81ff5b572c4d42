#include <immintrin.h>

#include <cstring>

#include "panels.hpp"

namespace minfer::cpu {
namespace {

// A row's block into its panel block or back: d, dmin, the three scale words, the 8 4-byte
// pieces of qh, then the 32 4-byte pieces of qs.
void move_q5_k(minfer_block_q5_k &row, Q5_KPanel &pb, int r, bool to_panels) {
  if (to_panels) {
    pb.d[r] = row.d, pb.dmin[r] = row.dmin;
    for (int i = 0; i < 3; ++i) std::memcpy(&pb.scales[i][r], row.scales + 4 * i, 4);
    for (int c = 0; c < 8; ++c) std::memcpy(pb.qh[c][r], row.qh + 4 * c, 4);
    for (int g = 0; g < 4; ++g)
      for (int c = 0; c < 8; ++c) std::memcpy(pb.qs[g][c][r], row.qs + 32 * g + 4 * c, 4);
  } else {
    row.d = pb.d[r], row.dmin = pb.dmin[r];
    for (int i = 0; i < 3; ++i) std::memcpy(row.scales + 4 * i, &pb.scales[i][r], 4);
    for (int c = 0; c < 8; ++c) std::memcpy(row.qh + 4 * c, pb.qh[c][r], 4);
    for (int g = 0; g < 4; ++g)
      for (int c = 0; c < 8; ++c) std::memcpy(row.qs + 32 * g + 4 * c, pb.qs[g][c][r], 4);
  }
}

#define MINFER_VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

// ---- Dot products straight from the panels (AVX-512 VNNI) ----------------------------------
// Q4_K's kernel (q4_k_panels.cpp) with the fifth bits: value l of sub-block j has bit j of
// qh[l], and qh's piece c (bytes 4c..4c+3 of 16 rows) serves every sub-block of the block, so
// sub-blocks 2g and 2g + 1 take bits 2g and 2g + 1 of it to bit 4 of their nibbles.
// (the row dots on the GEMM's units read Q5_K at 11-15 GB/s on a DRAM-bound 2048 x 65536
// matrix on a Zen 4 EPYC that streams 35-41; Q4_K's panels 43.)
template <int T>
MINFER_VNNI512 void q5_k_dots_vnni(const Q5_KPanel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {
  const __m512i low = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_panel_block(p + b, int(sizeof(Q5_KPanel)), int(sizeof(Q5_KPanel)));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].dmin)));
    for (int g = 0; g < 4; ++g) {
      __m512 dsc[2], dm[2];
      k4_scales_16(p[b].scales, d, dmin, g, dsc, dm);
      __m512i s0[T], s1[T];
      for (int t = 0; t < T; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        const __m512i v = _mm512_loadu_si512(p[b].qs[g][c]), h = _mm512_loadu_si512(p[b].qh[c]);
        // Bit 2g (2g + 1) of each qh byte to bit 4; 16-bit shifts, so the mask keeps each byte's own bit.
        const __m512i h0 = 2 * g <= 4 ? _mm512_slli_epi16(h, 4 - 2 * g) : _mm512_srli_epi16(h, 2 * g - 4);
        const __m512i h1 = 2 * g + 1 <= 4 ? _mm512_slli_epi16(h, 3 - 2 * g) : _mm512_srli_epi16(h, 2 * g - 3);
        // (A & B) | (C & bit4): one ternary-logic op each (0xEA: (A & B) | C) after masking C.
        const __m512i lo = _mm512_ternarylogic_epi32(v, low, _mm512_and_si512(h0, bit4), 0xEA);
        const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), low, _mm512_and_si512(h1, bit4), 0xEA);
        for (int t = 0; t < T; ++t) {
          const ActBlock *x = a + t * kb + b * 8 + 2 * g;
          s0[t] = _mm512_dpbusd_epi32(s0[t], lo, _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(x[0].qs + 4 * c)));
          s1[t] = _mm512_dpbusd_epi32(s1[t], hi, _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(x[1].qs + 4 * c)));
        }
      }
      for (int t = 0; t < T; ++t) {
        const ActBlock *x = a + t * kb + b * 8 + 2 * g;
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[t]), _mm512_mul_ps(dsc[0], _mm512_set1_ps(x[0].d)), acc[t]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[t]), _mm512_mul_ps(dsc[1], _mm512_set1_ps(x[1].d)), acc[t]);
        acc[t] = _mm512_fnmadd_ps(dm[0], _mm512_set1_ps(x[0].d_sum), acc[t]);
        acc[t] = _mm512_fnmadd_ps(dm[1], _mm512_set1_ps(x[1].d_sum), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * m, acc[t]);
}

}  // namespace

void q5_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  vnni_panel_passes<Q5_KPanel>("q5_k", isa, panel, k, a, tokens, y, m, [](auto tag, auto &&...args) { q5_k_dots_vnni<decltype(tag)::value>(args...); });
}

void q5_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q5_k, Q5_KPanel, 256>(panel, k, rows, move_q5_k); }

void q5_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q5_k, Q5_KPanel, 256>(w, k, m, to_panels, pool, move_q5_k);
}

}  // namespace minfer::cpu
