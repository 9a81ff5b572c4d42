#include <immintrin.h>

#include <cstring>

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

// ---- Dot products straight from the panels (AVX-512 VNNI: sub16_dots_vnni) -----------------
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

struct Q3_KUnit {
  using Panel = Q3_KPanel;
  static constexpr int kOffset = 4;
  struct Block {
    __m512 d;
    MINFER_VNNI512 explicit Block(const Panel &p) : d(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p.d)))) {}
    MINFER_VNNI512 void scales(const Panel &p, int j, __m512 (&ds)[2], __m512 (&)[2]) const {
      for (int i = 0; i < 2; ++i) ds[i] = q3_k_scales(p, d, 2 * j + i);
    }
  };
  MINFER_VNNI512 static __m512i values(const Panel &p, int j, int c) {
    const __m512i qs = _mm512_loadu_si512(p.qs[j / 4][c]), hm = _mm512_loadu_si512(p.hmask[c]);
    // bit j of each hmask byte to bit 2 (16-bit shifts; the mask keeps each byte's own bit)
    const __m512i hb = j <= 2 ? _mm512_slli_epi16(hm, 2 - j) : _mm512_srli_epi16(hm, j - 2);
    return _mm512_ternarylogic_epi32(_mm512_srli_epi16(qs, 2 * (j % 4)), _mm512_set1_epi8(0x03), _mm512_and_si512(hb, _mm512_set1_epi8(0x04)),
                                     0xEA);  // (A & B) | C
  }
};

}  // namespace

void q3_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  vnni_panel_passes<Q3_KPanel>("q3_k", isa, panel, k, a, tokens, y, m, [](auto tag, auto &&...args) { sub16_dots_vnni<Q3_KUnit, decltype(tag)::value>(args...); });
}

void q3_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q3_k, Q3_KPanel, 256>(panel, k, rows, move_q3_k); }

void q3_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q3_k, Q3_KPanel, 256>(w, k, m, to_panels, pool, move_q3_k);
}

}  // namespace minfer::cpu
