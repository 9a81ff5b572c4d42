// plugins/cpu/q8_0_panels.cpp — Q8_0 matmul weights in 16-row panels (AVX-512 VNNI and AMX's
// few-token steps only): each block's 16 rows' 8-bit values read as unsigned bytes (+128, an
// exclusive or of the sign bit), the 128 taken off through the minimum, as Q4_0's 8. Under
// AVX2 and AVX-VNNI Q8_0 keeps its rows (vpmaddubsw would saturate on values + 128).
#include <immintrin.h>

#include <cstring>

#include "panels.hpp"

namespace minfer::cpu {
namespace {

// A row's block into its panel block or back: the scale, then its eight 4-byte pieces.
void move_q8_0(minfer_block_q8_0 &row, Q8_0Panel &pb, int r, bool to_panels) {
  if (to_panels) {
    pb.d[r] = row.d;
    for (int c = 0; c < 8; ++c) std::memcpy(pb.qs[c][r], row.qs + 4 * c, 4);
  } else {
    row.d = pb.d[r];
    for (int c = 0; c < 8; ++c) std::memcpy(row.qs + 4 * c, pb.qs[c][r], 4);
  }
}

// block32_dots_vnni's unit: pieces 0-3 are values 0-15, 4-7 values 16-31, each + 128.
struct Q8Unit {
  using Panel = Q8_0Panel;
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))) static void pieces(const Panel &p, __m512i (&lo)[4],
                                                                                                     __m512i (&hi)[4]) {
    const __m512i sign = _mm512_set1_epi8(char(0x80));
    for (int c = 0; c < 4; ++c) {
      lo[c] = _mm512_xor_si512(_mm512_loadu_si512(p.qs[c]), sign);
      hi[c] = _mm512_xor_si512(_mm512_loadu_si512(p.qs[4 + c]), sign);
    }
  }
};

}  // namespace

void q8_0_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  if (isa != Isa::Avx512Vnni) throw sdk::Error(MINFER_ERR_INTERNAL, "q8_0 panels are read by the AVX-512 VNNI kernel only (panels_take)");
  const auto *pb = reinterpret_cast<const Q8_0Panel *>(panel);
  const int64_t kb = k / 32;
  in_passes<kVnniPanelTokens>(tokens, [&](auto tag, int64_t t0) {
    block32_dots_vnni<Q8Unit, decltype(tag)::value>(pb, kb, a + t0 * kb, kb, y + t0 * m, m);
  });
}

void q8_0_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q8_0, Q8_0Panel, 32>(panel, k, rows, move_q8_0); }

void q8_0_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q8_0, Q8_0Panel, 32>(w, k, m, to_panels, pool, move_q8_0);
}

}  // namespace minfer::cpu
