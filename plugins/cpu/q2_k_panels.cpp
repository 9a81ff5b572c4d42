#include <immintrin.h>

#include <cstring>

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

// ---- Dot products straight from the panels (AVX-512 VNNI: sub16_dots_vnni) -----------------
// Activation block j (values 32j..) is Q2_K group j: the 2-bit field at bit 2(j % 4) of qs
// bytes 32(j / 4) + l; sub-block s (16 values) has scale byte s: a 4-bit scale (low nibble)
// and a 4-bit min (high), d sc dot(q, x) - dmin m sum(x), the 16 rows' bytes as vectors.
// (Rows decoded each group's values and scales one row at a time: 6-10 GB/s on a one-token
// 2048 x 16384 matrix on a Zen 4 EPYC; panels 34.)
struct Q2_KUnit {
  using Panel = Q2_KPanel;
  static constexpr int kOffset = 0;  // a min per sub-block instead
  struct Block {
    __m512 d, dmin;
    MINFER_VNNI512 explicit Block(const Panel &p)
        : d(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p.d)))),
          dmin(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p.dmin)))) {}
    // Sub-blocks 2j, 2j + 1: scale bytes 2j % 4 and 2j % 4 + 1 of word j / 2.
    MINFER_VNNI512 void scales(const Panel &p, int j, __m512 (&ds)[2], __m512 (&dm)[2]) const {
      const __m512i w = _mm512_loadu_si512(p.scales[j / 2]), nib = _mm512_set1_epi32(0x0f);
      for (int i = 0; i < 2; ++i) {
        const __m512i sb = _mm512_srli_epi32(w, 8 * ((2 * j + i) % 4));
        ds[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(sb, nib)));
        dm[i] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(sb, 4), nib)));
      }
    }
  };
  MINFER_VNNI512 static __m512i values(const Panel &p, int j, int c) {
    return _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(p.qs[j / 4][c]), 2 * (j % 4)), _mm512_set1_epi8(0x03));
  }
};

}  // namespace

void q2_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  vnni_panel_passes<Q2_KPanel>("q2_k", isa, panel, k, a, tokens, y, m, [](auto tag, auto &&...args) { sub16_dots_vnni<Q2_KUnit, decltype(tag)::value>(args...); });
}

void q2_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q2_k, Q2_KPanel, 256>(panel, k, rows, move_q2_k); }

void q2_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q2_k, Q2_KPanel, 256>(w, k, m, to_panels, pool, move_q2_k);
}

}  // namespace minfer::cpu
