#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "panels.hpp"

namespace minfer::cpu {
namespace {

// A row's block into its panel block or back: d, the 16 scales, then its low and high bits
// in 4-byte pieces.
void move_q6_k(minfer_block_q6_k &row, Q6_KPanel &pb, int r, bool to_panels) {
  if (to_panels) {
    pb.d[r] = row.d;
    for (int s = 0; s < 16; ++s) pb.scales[s][r] = row.scales[s];
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 8; ++c) {
        for (int qq = 0; qq < 2; ++qq) std::memcpy(pb.ql[h][qq][c][r], row.ql + 64 * h + 32 * qq + 4 * c, 4);
        std::memcpy(pb.qh[h][c][r], row.qh + 32 * h + 4 * c, 4);
      }
  } else {
    row.d = pb.d[r];
    for (int s = 0; s < 16; ++s) row.scales[s] = pb.scales[s][r];
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 8; ++c) {
        for (int qq = 0; qq < 2; ++qq) std::memcpy(row.ql + 64 * h + 32 * qq + 4 * c, pb.ql[h][qq][c][r], 4);
        std::memcpy(row.qh + 32 * h + 4 * c, pb.qh[h][c][r], 4);
      }
  }
}

#define MINFER_VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

// ---- Dot products straight from the panels ------------------------------------------------
// Activation block j (values 32j..32j+31) covers sub-blocks 2j and 2j+1 (16 values each, an
// int8 scale each). Its values are the low or high nibbles of ql bytes (64h + 32(q & 1) + l,
// h = j / 4, q = j % 4) with two high bits from qh byte 32h + l at bit 2q, unsigned 0..63:
// dot(v - 32, x) = dot(v, x) - 32 sum(x) per sub-block, the sums from the activation block
// (d_sum_lo: the first 16 values). Per (16 rows, 32 values, token): 8 vpdpbusd and four FMAs.
// AVX-512 only: measured (AMD EPYC Zen 4, 2 threads, 2048 x 65536, us; rows | panels) it
// gains little at one token (vnni 4080 | 3290-3780) and much at four (11830 | 4940-5370),
// but an AVX2 version was slower than the row dots at one token (4395 | 4747-5052) and made
// Qwen2-1.5B Q4_K_M's tg32 3% slower, so AVX2 machines keep Q6_K in rows.

// One or two tokens: each (h, c)'s ql and qh pieces loaded once for the four activation
// blocks 4h..4h+3 that share them (the high bits of block 4h + q are qh bits 2q, moved to bits
// 4-5 by one shift and a mask), 8 int32 sums a token; more tokens take the loop below, whose
// 8 sums for all blocks would not fit the registers.
template <int T>
MINFER_VNNI512 void q6_k_dots_vnni_few(const Q6_KPanel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {
  const __m512i low = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    // One block (3.4 KiB) ahead into L1: two put the L1 prefetch within 1.3 KiB of the L2 one
    // (kL2Ahead), which then hid little of DRAM's latency. DRAM-bound 2048 x 151936 at one token
    // (AMD EPYC Zen 4, 2 threads, alternating runs): 25.3-32.7 GB/s against 20.6-23.1.
    prefetch_panel_block(p + b, int(sizeof(Q6_KPanel)), int(sizeof(Q6_KPanel)));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    for (int h = 0; h < 2; ++h) {
      __m512i s[4][2][T];  // block 4h + q, sub-block (values 0-15, 16-31), token
      for (int q = 0; q < 4; ++q)
        for (int t = 0; t < T; ++t) s[q][0][t] = s[q][1][t] = _mm512_setzero_si512();
      // Unrolled, so that s's indices are constants and its 8 T sums stay in registers (a loop
      // kept them on the stack: a load and a store around every vpdpbusd).
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m512i l0 = _mm512_loadu_si512(p[b].ql[h][0][c]), l1 = _mm512_loadu_si512(p[b].ql[h][1][c]);
        const __m512i hb = _mm512_loadu_si512(p[b].qh[h][c]);
        // (lo & 0x0f) | hi, one ternary-logic op each (0xEA: (A & B) | C).
        const __m512i v[4] = {
            _mm512_ternarylogic_epi32(l0, low, _mm512_and_si512(_mm512_slli_epi16(hb, 4), bits45), 0xEA),
            _mm512_ternarylogic_epi32(l1, low, _mm512_and_si512(_mm512_slli_epi16(hb, 2), bits45), 0xEA),
            _mm512_ternarylogic_epi32(_mm512_srli_epi16(l0, 4), low, _mm512_and_si512(hb, bits45), 0xEA),
            _mm512_ternarylogic_epi32(_mm512_srli_epi16(l1, 4), low, _mm512_and_si512(_mm512_srli_epi16(hb, 2), bits45), 0xEA)};
        for (int t = 0; t < T; ++t)
          for (int q = 0; q < 4; ++q) {
            const ActBlock &x = a[t * kb + b * 8 + 4 * h + q];
            __m512i &sum = s[q][c / 4][t];
            sum = _mm512_dpbusd_epi32(sum, v[q], _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(x.qs + 4 * c)));
          }
      }
      for (int q = 0; q < 4; ++q) {
        const int j = 4 * h + q;
        const __m512 ds0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].scales[2 * j])))));
        const __m512 ds1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].scales[2 * j + 1])))));
        for (int t = 0; t < T; ++t) {
          const ActBlock &x = a[t * kb + b * 8 + j];
          const __m512 xd = _mm512_set1_ps(x.d);
          acc[t] = _mm512_fmadd_ps(ds0, _mm512_fmadd_ps(xd, _mm512_cvtepi32_ps(s[q][0][t]), _mm512_set1_ps(-32.0f * x.d_sum_lo)), acc[t]);
          acc[t] = _mm512_fmadd_ps(ds1, _mm512_fmadd_ps(xd, _mm512_cvtepi32_ps(s[q][1][t]), _mm512_set1_ps(-32.0f * (x.d_sum - x.d_sum_lo))), acc[t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * m, acc[t]);
}

// Three or more tokens: sub16_dots_vnni, a piece's 6-bit values rebuilt for each block j.
struct Q6_KUnit {
  using Panel = Q6_KPanel;
  static constexpr int kOffset = 32;
  struct Block {
    __m512 d;
    MINFER_VNNI512 explicit Block(const Panel &p) : d(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p.d)))) {}
    MINFER_VNNI512 void scales(const Panel &p, int j, __m512 (&ds)[2], __m512 (&)[2]) const {
      for (int i = 0; i < 2; ++i)
        ds[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p.scales[2 * j + i])))));
    }
  };
  MINFER_VNNI512 static __m512i values(const Panel &p, int j, int c) {
    const int h = j / 4, q = j % 4;
    const __m512i l4 = _mm512_loadu_si512(p.ql[h][q & 1][c]), h2 = _mm512_loadu_si512(p.qh[h][c]), low = _mm512_set1_epi8(0x0f);
    const __m512i lo = q < 2 ? _mm512_and_si512(l4, low) : _mm512_and_si512(_mm512_srli_epi16(l4, 4), low);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(h2, 2 * q), _mm512_set1_epi8(0x03));
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 4));  // hi <= 3: the shift stays in its byte
  }
};

}  // namespace

void q6_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  vnni_panel_passes<Q6_KPanel>("q6_k", isa, panel, k, a, tokens, y, m, [](auto tag, auto &&...args) {
    constexpr int kT = decltype(tag)::value;
    if constexpr (kT <= 2) q6_k_dots_vnni_few<kT>(args...);
    else sub16_dots_vnni<Q6_KUnit, kT>(args...);
  });
}

void q6_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q6_k, Q6_KPanel, 256>(panel, k, rows, move_q6_k); }

void q6_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q6_k, Q6_KPanel, 256>(w, k, m, to_panels, pool, move_q6_k);
}

}  // namespace minfer::cpu
