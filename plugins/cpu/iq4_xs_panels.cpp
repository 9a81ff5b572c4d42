#include "panels.hpp"

#include <immintrin.h>

#include <cstring>

namespace minfer::cpu {
namespace {

// A row's block into its panel block or back: d, the scale bits, then sub-block j's four
// 4-byte pieces.
void move_iq4_xs(minfer_block_iq4_xs &row, IQ4_XSPanel &pb, int r, bool to_panels) {
  if (to_panels) {
    pb.d[r] = row.d, pb.scales_h[r] = row.scales_h;
    std::memcpy(&pb.scales_l[r], row.scales_l, 4);
    for (int j = 0; j < 8; ++j)
      for (int c = 0; c < 4; ++c) std::memcpy(pb.qs[j][c][r], row.qs + 16 * j + 4 * c, 4);
  } else {
    row.d = pb.d[r], row.scales_h = pb.scales_h[r];
    std::memcpy(row.scales_l, &pb.scales_l[r], 4);
    for (int j = 0; j < 8; ++j)
      for (int c = 0; c < 4; ++c) std::memcpy(row.qs + 16 * j + 4 * c, pb.qs[j][c][r], 4);
  }
}

// AVX-512, T tokens: each 32-value sub-block j of a 256-value block is Q4_0's work (8
// vpdpbusd on the table's values + 128, two FMAs), with the 16 rows' scales d * (6 bits - 32)
// decoded as one vector a sub-block: low 4 bits at bit 4j of scales_l, high 2 at bit 2j of
// scales_h. Row r, sub-block j: ds (d_x dot(v + 128, x) - 128 d_x sum(x)).
template <int T>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))) void iq4_xs_dots_vnni(const IQ4_XSPanel *p, int64_t nb,
                                                                                                      const ActBlock *a, int64_t kb, float *y,
                                                                                                      int64_t m) {
  const __m512i low = _mm512_set1_epi8(0x0f), table = iq4_table_u8_512();
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_panel_block(p + b, int(sizeof(IQ4_XSPanel)), 2 * int(sizeof(IQ4_XSPanel)));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    const __m512i sl = _mm512_loadu_si512(p[b].scales_l);
    const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].scales_h)));
    for (int j = 0; j < 8; ++j) {
      const __m512i bits = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0x0f)),
                                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4));
      const __m512 ds = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(bits, _mm512_set1_epi32(32))));
      __m512i s0[T], s1[T];
      for (int t = 0; t < T; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        const __m512i v = _mm512_loadu_si512(p[b].qs[j][c]);
        const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low));
        const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
        for (int t = 0; t < T; ++t) {
          const ActBlock &x = a[t * kb + 8 * b + j];
          s0[t] = _mm512_dpbusd_epi32(s0[t], lo, _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(x.qs + 4 * c)));
          s1[t] = _mm512_dpbusd_epi32(s1[t], hi, _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(x.qs + 16 + 4 * c)));
        }
      }
      for (int t = 0; t < T; ++t) {
        const ActBlock &x = a[t * kb + 8 * b + j];
        const __m512 dot = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[t], s1[t])), _mm512_set1_ps(x.d), _mm512_set1_ps(-128.0f * x.d_sum));
        acc[t] = _mm512_fmadd_ps(ds, dot, acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * m, acc[t]);
}

}  // namespace

void iq4_xs_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  vnni_panel_passes<IQ4_XSPanel>("iq4_xs", isa, panel, k, a, tokens, y, m,
                                 [](auto tag, const IQ4_XSPanel *p, int64_t nb, const ActBlock *x, int64_t kb, float *out, int64_t mm) {
                                   iq4_xs_dots_vnni<decltype(tag)::value>(p, nb, x, kb, out, mm);
                                 });
}

void iq4_xs_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) {
  panel_to_rows<minfer_block_iq4_xs, IQ4_XSPanel, 256>(panel, k, rows, move_iq4_xs);
}

void iq4_xs_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_iq4_xs, IQ4_XSPanel, 256>(w, k, m, to_panels, pool, move_iq4_xs);
}

}  // namespace minfer::cpu
