// plugins/cpu/q4_0_panels.hpp — Q4_0 weights repacked, in their own buffer, into 16-row panels.
//
// In GGUF order a matmul reads one row at a time: each (row, block, token) then pays a
// horizontal sum and a scale product beside its integer dot, and a step of 2-8 tokens (a
// batch of decode steps) runs compute-bound at a fraction of the bytes' rate. Interleaved so
// that 16 rows' same 4 bytes lie side by side, one 64-byte load holds [row][4 values] for 16
// rows, the layout of the tiled GEMM's panels (int8_gemm.hpp): the GEMM then unpacks nibbles
// instead of transposing rows, and takes every token count, one included. Same size as the
// rows: panel p of a matrix holds rows 16p..16p+15 where those rows were.
//
// The repack happens in place in the plugin's own weight buffer, so the model is held once.
// CpuBuffer keeps which ranges hold panels; a host read or write of such a range turns it
// back into rows first, so the host never sees the layout.
#pragma once

#include <cstdint>

#include "minfer/blocks.h"
#include "qdot.hpp"

namespace minfer::cpu {

inline constexpr int kPanelRows = 16;

// One 32-value block of 16 rows: the rows' scales, then qs[c][r] = bytes 4c..4c+3 of row r's
// block (low nibbles: values 4c..4c+3; high: 16 + 4c..).
struct Q4_0Panel {
  uint16_t d[kPanelRows];
  uint8_t qs[4][kPanelRows][4];
};
static_assert(sizeof(Q4_0Panel) == kPanelRows * sizeof(minfer_block_q4_0), "a panel block is its rows' blocks, moved");

class ThreadPool;

// Whether a [k, m] Q4_0 weight can be held as panels: whole panels of rows.
inline bool panels_fit(int64_t k, int64_t m) { return k % 32 == 0 && m % kPanelRows == 0 && m > 0; }

// In place: m rows of k values (GGUF order) to panels, and back.
void rows_to_panels(uint8_t *w, int64_t k, int64_t m, ThreadPool *pool);
void panels_to_rows(uint8_t *w, int64_t k, int64_t m, ThreadPool *pool);

// y[t * m + o] = row o of the panels (m rows of k values) dotted with token t, for t < tokens
// (activations quantized by quantize_activations); isa Avx2 or Avx512Vnni.
void q4_0_panel_matmul(Isa isa, const uint8_t *panels, int64_t k, int64_t m, const ActBlock *a, int64_t tokens, float *y, ThreadPool &pool);

}  // namespace minfer::cpu
