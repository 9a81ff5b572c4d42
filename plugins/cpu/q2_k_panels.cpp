#include <immintrin.h>

#include <cstring>

#include "minfer/plugin.hpp"
#include "panels.hpp"

namespace minfer::cpu {
namespace {

// A row's block into its panel block or back: the four words of its 16 scale bytes, the 16
// 4-byte pieces of qs, d and dmin.
void move_q2_k(minfer_block_q2_k &row, Q2_KPanel &pb, int r, bool to_panels) {
  if (to_panels) {
    for (int i = 0; i < 4; ++i) std::memcpy(&pb.scales[i][r], row.scales + 4 * i, 4);
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 8; ++c) std::memcpy(pb.qs[h][c][r], row.qs + 32 * h + 4 * c, 4);
    pb.d[r] = row.d, pb.dmin[r] = row.dmin;
  } else {
    for (int i = 0; i < 4; ++i) std::memcpy(row.scales + 4 * i, &pb.scales[i][r], 4);
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 8; ++c) std::memcpy(row.qs + 32 * h + 4 * c, pb.qs[h][c][r], 4);
    row.d = pb.d[r], row.dmin = pb.dmin[r];
  }
}

#define MINFER_VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

// ---- Dot products straight from the panels (AVX-512 VNNI) ----------------------------------
// Activation block j (values 32j..) is Q2_K group j: the 2-bit field at bit 2(j % 4) of qs
// bytes 32(j / 4) + l; sub-block s (16 values) has scale byte s: a 4-bit scale (low nibble)
// and a 4-bit min (high), d sc dot(q, x) - dmin m sum(x), the 16 rows' bytes as vectors.
// (Rows decoded each group's values and scales one row at a time: ~10 GB/s on a DRAM-bound
// 2048 x 65536 matrix on a Zen 4 EPYC that streams 35-41.)
template <int T>
MINFER_VNNI512 void q2_k_dots_vnni(const Q2_KPanel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {
  const __m512i two = _mm512_set1_epi8(0x03), nib = _mm512_set1_epi32(0x0f);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_panel_block(p + b, int(sizeof(Q2_KPanel)), 2 * int(sizeof(Q2_KPanel)));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].dmin)));
    for (int j = 0; j < 8; ++j) {
      const int h = j / 4, q = j % 4;
      __m512 ds[2], dm[2];  // sub-blocks 2j, 2j + 1: scale bytes 2j % 4 and 2j % 4 + 1 of word j / 2
      const __m512i w = _mm512_loadu_si512(p[b].scales[j / 2]);
      for (int i = 0; i < 2; ++i) {
        const __m512i sb = _mm512_srli_epi32(w, 8 * ((2 * j + i) % 4));
        ds[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(sb, nib)));
        dm[i] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(sb, 4), nib)));
      }
      __m512i s0[T], s1[T];
      for (int t = 0; t < T; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        const __m512i v = _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(p[b].qs[h][c]), 2 * q), two);
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
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(ds[0], xd), _mm512_cvtepi32_ps(s0[t]), acc[t]);
        acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(ds[1], xd), _mm512_cvtepi32_ps(s1[t]), acc[t]);
        acc[t] = _mm512_fnmadd_ps(dm[0], _mm512_set1_ps(x.d_sum_lo), acc[t]);
        acc[t] = _mm512_fnmadd_ps(dm[1], _mm512_set1_ps(x.d_sum - x.d_sum_lo), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * m, acc[t]);
}

// Tokens per pass: two int32 sums and an accumulator a token.
constexpr int kVnniTokens = 8;

}  // namespace

void q2_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  if (isa != Isa::Avx512Vnni) throw sdk::Error(MINFER_ERR_INTERNAL, "q2_k panels are read by the AVX-512 VNNI kernel only (panels_take)");
  const auto *pb = reinterpret_cast<const Q2_KPanel *>(panel);
  const int64_t nb = k / 256, kb = k / 32;
  in_passes<kVnniTokens>(tokens, [&](auto tag, int64_t t0) { q2_k_dots_vnni<decltype(tag)::value>(pb, nb, a + t0 * kb, kb, y + t0 * m, m); });
}

void q2_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q2_k, Q2_KPanel, 256>(panel, k, rows, move_q2_k); }

void q2_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q2_k, Q2_KPanel, 256>(w, k, m, to_panels, pool, move_q2_k);
}

}  // namespace minfer::cpu
