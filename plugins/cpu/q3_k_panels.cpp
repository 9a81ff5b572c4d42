#include <immintrin.h>

#include <cstring>

#include "minfer/plugin.hpp"
#include "panels.hpp"

namespace minfer::cpu {
namespace {

// A row's block into its panel block or back: hmask's 8 and qs's 16 4-byte pieces, the three
// scale words and d.
void move_q3_k(minfer_block_q3_k &row, Q3_KPanel &pb, int r, bool to_panels) {
  if (to_panels) {
    for (int c = 0; c < 8; ++c) std::memcpy(pb.hmask[c][r], row.hmask + 4 * c, 4);
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 8; ++c) std::memcpy(pb.qs[h][c][r], row.qs + 32 * h + 4 * c, 4);
    for (int i = 0; i < 3; ++i) std::memcpy(&pb.scales[i][r], row.scales + 4 * i, 4);
    pb.d[r] = row.d;
  } else {
    for (int c = 0; c < 8; ++c) std::memcpy(row.hmask + 4 * c, pb.hmask[c][r], 4);
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 8; ++c) std::memcpy(row.qs + 32 * h + 4 * c, pb.qs[h][c][r], 4);
    for (int i = 0; i < 3; ++i) std::memcpy(row.scales + 4 * i, &pb.scales[i][r], 4);
    row.d = pb.d[r];
  }
}

#define MINFER_VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

// ---- Dot products straight from the panels (AVX-512 VNNI) ----------------------------------
// Activation block j (values 32j..) is Q3_K group j: the 2-bit field at bit 2(j % 4) of qs
// bytes 32(j / 4) + l, plus bit j of hmask[l] as the third bit: unsigned 0..7, offset 4; a
// six-bit signed scale per 16 values (sub-blocks 2j, 2j + 1), decoded for the 16 rows as
// vectors: the low 4 bits from byte s % 8 of the first two scale words (high nibble for
// s >= 8), the high 2 from byte s % 4 of the third at bit 2 (s / 4). dot(v - 4, x) = dot(v, x)
// - 4 sum(x) per sub-block, the sums from the activation block. (Rows decoded each group's
// values and scales one row at a time: 6-9 GB/s on a DRAM-bound 2048 x 65536 matrix on a Zen
// 4 EPYC that streams 35-41.)
MINFER_VNNI512 inline __m512 q3_k_scales(const Q3_KPanel &p, const __m512 &d, int s) {
  const __m512i w = _mm512_loadu_si512((s & 7) < 4 ? p.scales[0] : p.scales[1]), w2 = _mm512_loadu_si512(p.scales[2]);
  const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(w, _mm512_set1_epi32(8 * (s & 3) + (s >= 8 ? 4 : 0))), _mm512_set1_epi32(0x0f));
  const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(w2, _mm512_set1_epi32(8 * (s & 3) + 2 * (s >> 2))), _mm512_set1_epi32(0x03));
  const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
}

template <int T>
MINFER_VNNI512 void q3_k_dots_vnni(const Q3_KPanel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {
  const __m512i two = _mm512_set1_epi8(0x03), bit2 = _mm512_set1_epi8(0x04);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_panel_block(p + b, int(sizeof(Q3_KPanel)), 2 * int(sizeof(Q3_KPanel)));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    for (int j = 0; j < 8; ++j) {
      const int h = j / 4, q = j % 4;
      const __m512 ds0 = q3_k_scales(p[b], d, 2 * j), ds1 = q3_k_scales(p[b], d, 2 * j + 1);
      __m512i s0[T], s1[T];
      for (int t = 0; t < T; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        const __m512i qs = _mm512_loadu_si512(p[b].qs[h][c]), hm = _mm512_loadu_si512(p[b].hmask[c]);
        // bit j of each hmask byte to bit 2 (16-bit shifts; the mask keeps each byte's own bit)
        const __m512i hb = j <= 2 ? _mm512_slli_epi16(hm, 2 - j) : _mm512_srli_epi16(hm, j - 2);
        const __m512i v = _mm512_ternarylogic_epi32(_mm512_srli_epi16(qs, 2 * q), two, _mm512_and_si512(hb, bit2), 0xEA);  // (A & B) | C
        for (int t = 0; t < T; ++t) {
          const ActBlock &x = a[t * kb + b * 8 + j];
          const __m512i xv = _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(x.qs + 4 * c));
          if (c < 4) s0[t] = _mm512_dpbusd_epi32(s0[t], v, xv);
          else s1[t] = _mm512_dpbusd_epi32(s1[t], v, xv);
        }
      }
      for (int t = 0; t < T; ++t) {
        const ActBlock &x = a[t * kb + b * 8 + j];
        const __m512 xd = _mm512_set1_ps(x.d);
        acc[t] = _mm512_fmadd_ps(ds0, _mm512_fmadd_ps(xd, _mm512_cvtepi32_ps(s0[t]), _mm512_set1_ps(-4.0f * x.d_sum_lo)), acc[t]);
        acc[t] = _mm512_fmadd_ps(ds1, _mm512_fmadd_ps(xd, _mm512_cvtepi32_ps(s1[t]), _mm512_set1_ps(-4.0f * (x.d_sum - x.d_sum_lo))), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * m, acc[t]);
}

// Tokens per pass: two int32 sums and an accumulator a token.
constexpr int kVnniTokens = 8;

}  // namespace

void q3_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  if (isa != Isa::Avx512Vnni) throw sdk::Error(MINFER_ERR_INTERNAL, "q3_k panels are read by the AVX-512 VNNI kernel only (panels_take)");
  const auto *pb = reinterpret_cast<const Q3_KPanel *>(panel);
  const int64_t nb = k / 256, kb = k / 32;
  in_passes<kVnniTokens>(tokens, [&](auto tag, int64_t t0) { q3_k_dots_vnni<decltype(tag)::value>(pb, nb, a + t0 * kb, kb, y + t0 * m, m); });
}

void q3_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q3_k, Q3_KPanel, 256>(panel, k, rows, move_q3_k); }

void q3_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q3_k, Q3_KPanel, 256>(w, k, m, to_panels, pool, move_q3_k);
}

}  // namespace minfer::cpu
