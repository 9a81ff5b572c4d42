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

// ---- Dot products straight from the panels: k4_dots_vnni (panels.hpp) ----------------------
// (The row dots on the GEMM's units read Q5_K at 11-15 GB/s on a DRAM-bound 2048 x 65536
// matrix on a Zen 4 EPYC that streams 35-41; the panels 26-34.)

}  // namespace

void q5_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  vnni_panel_passes<Q5_KPanel>("q5_k", isa, panel, k, a, tokens, y, m, [](auto tag, auto &&...args) { k4_dots_vnni<Q5_KPanel, decltype(tag)::value>(args...); });
}

void q5_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) { panel_to_rows<minfer_block_q5_k, Q5_KPanel, 256>(panel, k, rows, move_q5_k); }

void q5_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q5_k, Q5_KPanel, 256>(w, k, m, to_panels, pool, move_q5_k);
}

}  // namespace minfer::cpu
