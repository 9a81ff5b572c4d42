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

// ---- AVX2: the table's signed values, |w| x sign(a, w) ---------------------------------
// vpmaddubsw would saturate on the values + 128 (2 x 241 x 127 > 2^15), so AVX2 takes the
// signed values (-127..113) as the row dots do: each product pair's int16 sum stays below
// 2^15 but two do not, so each step widens to int32 at once. Per (8 rows, 4 values, token):
// a sign, a vpmaddubsw, a vpmaddwd and an add, twice Q4_0's panel work; the rows' dots had
// spent more on their horizontal sums (2048 x 512 one token: IQ4_XS 65.9 us, IQ4_NL 37.0).

#define MINFER_AVX2 __attribute__((target("avx2,fma,f16c")))

MINFER_AVX2 inline __m256i iq4_table_s8_256() {
  return _mm256_set_epi64x(int64_t(MINFER_IQ4_VALUES_HI), int64_t(MINFER_IQ4_VALUES_LO), int64_t(MINFER_IQ4_VALUES_HI), int64_t(MINFER_IQ4_VALUES_LO));
}

// One 32-value sub-block of 8 rows (qs: its four pieces, [4 bytes x 16 rows] each, from the
// half's row) against T tokens (x: token 0's activation block, kb blocks a token): the int32
// dots, scaled by ds x d_a into acc. Rolled over the pieces, as Q4_0's AVX2 pass.
template <int T>
MINFER_AVX2 inline void iq4_sub_avx2(const uint8_t (*qs)[kPanelRows][4], int half, __m256 ds, const ActBlock *x, int64_t kb, __m256 *acc) {
  const __m256i low = _mm256_set1_epi8(0x0f), table = iq4_table_s8_256(), ones = _mm256_set1_epi16(1);
  __m256i s[T];
  for (int t = 0; t < T; ++t) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs[c][8 * half]));
    const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
    const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
    const __m256i alo = _mm256_abs_epi8(lo), ahi = _mm256_abs_epi8(hi);
    for (int t = 0; t < T; ++t) {
      const ActBlock &a = x[t * kb];
      const __m256i xl = _mm256_broadcastd_epi32(_mm_loadu_si32(a.qs + 4 * c)), xh = _mm256_broadcastd_epi32(_mm_loadu_si32(a.qs + 16 + 4 * c));
      s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(alo, _mm256_sign_epi8(xl, lo)), ones));
      s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(ahi, _mm256_sign_epi8(xh, hi)), ones));
    }
  }
  for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(ds, _mm256_set1_ps(x[t * kb].d)), acc[t]);
}

// IQ4_NL's panels (Q4_0's layout: a block is a sub-block with its rows' d) and IQ4_XS's, 8
// rows at a time (the second half reads the panel from L2).
template <int T>
MINFER_AVX2 void iq4_nl_dots_avx2(const IQ4_NLPanel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {
  for (int half = 0; half < 2; ++half) {
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      if (half == 0) prefetch_panel_block(p + b, int(sizeof(IQ4_NLPanel)), 2048);
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].d + 8 * half)));
      iq4_sub_avx2<T>(p[b].qs, half, d, a + b, kb, acc);
    }
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * m + 8 * half, acc[t]);
  }
}
template <int T>
MINFER_AVX2 void iq4_xs_dots_avx2(const IQ4_XSPanel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {
  for (int half = 0; half < 2; ++half) {
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      if (half == 0) prefetch_panel_block(p + b, int(sizeof(IQ4_XSPanel)), 2 * int(sizeof(IQ4_XSPanel)));
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].d + 8 * half)));
      const __m256i sl = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].scales_l + 8 * half));
      const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].scales_h + 8 * half)));
      for (int j = 0; j < 8; ++j) {
        const __m256i bits = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0x0f)),
                                             _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3)), 4));
        const __m256 ds = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(bits, _mm256_set1_epi32(32))));
        iq4_sub_avx2<T>(p[b].qs[j], half, ds, a + 8 * b + j, kb, acc);
      }
    }
    for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * m + 8 * half, acc[t]);
  }
}

// Tokens per AVX2 pass: T int32 and T float sums beside the table, two pieces and their
// magnitudes (16 registers at 4).
constexpr int kIq4Avx2Tokens = 4;

}  // namespace

void iq4_panel_dots_avx2(int32_t dtype, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  const int64_t kb = k / 32;
  in_passes<kIq4Avx2Tokens>(tokens, [&](auto tag, int64_t t0) {
    constexpr int kT = decltype(tag)::value;
    if (dtype == MINFER_DTYPE_IQ4_XS)
      iq4_xs_dots_avx2<kT>(reinterpret_cast<const IQ4_XSPanel *>(panel), k / 256, a + t0 * kb, kb, y + t0 * m, m);
    else
      iq4_nl_dots_avx2<kT>(reinterpret_cast<const IQ4_NLPanel *>(panel), kb, a + t0 * kb, kb, y + t0 * m, m);
  });
}

void iq4_xs_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  if (isa != Isa::Avx512Vnni) return iq4_panel_dots_avx2(MINFER_DTYPE_IQ4_XS, panel, k, a, tokens, y, m);  // AVX2 and AVX-VNNI
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
