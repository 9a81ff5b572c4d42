// plugins/cpu/panels.hpp — Q4_0, Q4_1, Q5_0, Q5_1, K-quant (Q2_K..Q6_K) and IQ4 matmul weights repacked, in their
// own buffer, into 16-row panels.
//
// In GGUF order a matmul reads one row at a time: each (row, block, token) then pays a
// horizontal sum and a scale product beside its integer dot, and a decode step (or a batch
// of them) runs compute-bound at a fraction of the bytes' rate. Interleaved so that 16 rows'
// same 4 bytes lie side by side, one 64-byte load holds [row][4 values] for 16 rows, the
// layout of the tiled GEMM's panels (int8_gemm.hpp), and the scales of 16 rows are vectors:
// every token count, one included, runs at the bytes' rate. Same size as the rows: panel p
// of a matrix holds rows 16p..16p+15 where those rows were.
//
// The repack happens in place in the plugin's own weight buffer, so the model is held once.
// CpuBuffer keeps which ranges hold panels; a host read or write of such a range turns it
// back into rows first, so the host never sees the layout.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "minfer/blocks.h"
#include "minfer/dtype.h"
#include "minfer/plugin.hpp"
#include "qdot.hpp"
#include "thread_pool.hpp"

namespace minfer::cpu {

inline constexpr int kPanelRows = 16;

// Q4_0 (q4_0_panels.cpp): one 32-value block of 16 rows: the rows' scales, then qs[c][r] =
// bytes 4c..4c+3 of row r's block (low nibbles: values 4c..4c+3; high: 16 + 4c..).
struct Q4_0Panel {
  static constexpr float kOffset = 8.0f;  // the nibbles sit 8 above the values
  uint16_t d[kPanelRows];
  uint8_t qs[4][kPanelRows][4];
};
static_assert(sizeof(Q4_0Panel) == kPanelRows * sizeof(minfer_block_q4_0), "a panel block is its rows' blocks, moved");
// Q4_1 (q4_0_panels.cpp, beside Q4_0): Q4_0's with the rows' minima m after their scales.
struct Q4_1Panel {
  uint16_t d[kPanelRows], m[kPanelRows];
  uint8_t qs[4][kPanelRows][4];
};
static_assert(sizeof(Q4_1Panel) == kPanelRows * sizeof(minfer_block_q4_1), "a panel block is its rows' blocks, moved");

// Q8_0 (q8_0_panels.cpp): one 32-value block of 16 rows: the rows' scales, then qs[c][r] =
// values 4c..4c+3 of row r's block (signed; read + 128).
struct Q8_0Panel {
  static constexpr float kOffset = 128.0f;
  uint16_t d[kPanelRows];
  int8_t qs[8][kPanelRows][4];
};
static_assert(sizeof(Q8_0Panel) == kPanelRows * sizeof(minfer_block_q8_0), "a panel block is its rows' blocks, moved");

// IQ4_NL (q4_0_panels.cpp, beside Q4_0): Q4_0's panel; the nibbles are indices into the
// 16-value table (blocks.h), which the kernels look up as its values + 128 (unsigned bytes for
// vpdpbusd; the 128 taken off through the min, as Q4_0's 8).
struct IQ4_NLPanel {
  static constexpr float kOffset = 128.0f;
  static constexpr bool kTable = true;
  uint16_t d[kPanelRows];
  uint8_t qs[4][kPanelRows][4];
};
static_assert(sizeof(IQ4_NLPanel) == kPanelRows * sizeof(minfer_block_iq4_nl), "a panel block is its rows' blocks, moved");
// IQ4_XS (iq4_panels.cpp): one 256-value block of 16 rows: the rows' d, scales_h and
// scales_l (4 bytes, as a word: sub-block j's low 4 bits at bit 4j), then qs[j][c][r] = bytes
// 16j + 4c..+3 of row r (sub-block j's indices: low nibbles values 4c.., high 16 + 4c..).
struct IQ4_XSPanel {
  uint16_t d[kPanelRows], scales_h[kPanelRows];
  uint32_t scales_l[kPanelRows];
  uint8_t qs[8][4][kPanelRows][4];
};
static_assert(sizeof(IQ4_XSPanel) == kPanelRows * sizeof(minfer_block_iq4_xs), "a panel block is its rows' blocks, moved");

// The IQ4 table as unsigned bytes (values + 128) in every 128-bit lane, for vpshufb.
__attribute__((target("avx2"))) inline __m256i iq4_table_u8_256() {
  constexpr uint64_t flip = 0x8080808080808080ull;
  return _mm256_set_epi64x(int64_t(MINFER_IQ4_VALUES_HI ^ flip), int64_t(MINFER_IQ4_VALUES_LO ^ flip), int64_t(MINFER_IQ4_VALUES_HI ^ flip),
                           int64_t(MINFER_IQ4_VALUES_LO ^ flip));
}
__attribute__((target("avx2,avx512f,avx512bw"))) inline __m512i iq4_table_u8_512() {
  return _mm512_broadcast_i64x4(iq4_table_u8_256());
}

// Q5_0 (q5_0_panels.cpp): Q4_0's panel with each row's 32 fifth bits as one word between the
// scales and qs, regrouped so that byte j holds piece c's bits (value 4c + j at bit c, value
// 16 + 4c + j at bit 4 + c): a piece's fifth bits reach bit 4 of their bytes by one shift.
struct Q5_0Panel {
  static constexpr float kOffset = 16.0f;
  uint16_t d[kPanelRows];
  uint32_t qh[kPanelRows];
  uint8_t qs[4][kPanelRows][4];
};
static_assert(sizeof(Q5_0Panel) == kPanelRows * sizeof(minfer_block_q5_0), "a panel block is its rows' blocks, moved");
// Q5_1 (q5_0_panels.cpp, beside Q5_0): Q5_0's with the rows' minima m after their scales (x = d q + m).
struct Q5_1Panel {
  uint16_t d[kPanelRows], m[kPanelRows];
  uint32_t qh[kPanelRows];
  uint8_t qs[4][kPanelRows][4];
};
static_assert(sizeof(Q5_1Panel) == kPanelRows * sizeof(minfer_block_q5_1), "a panel block is its rows' blocks, moved");

// Q4_K (q4_k_panels.cpp): one 256-value block of 16 rows: the rows' d and dmin, word i of
// each row's 12 scale bytes (the words the 6-bit fields are decoded from), then qs[g][c][r] =
// bytes 32g + 4c..+3 of row r (low nibbles: values 64g + 4c..+3 of sub-block 2g; high: the
// same positions of sub-block 2g + 1).
struct Q4_KPanel {
  uint16_t d[kPanelRows], dmin[kPanelRows];
  uint32_t scales[3][kPanelRows];
  uint8_t qs[4][8][kPanelRows][4];
};
static_assert(sizeof(Q4_KPanel) == kPanelRows * sizeof(minfer_block_q4_k), "a panel block is its rows' blocks, moved");

// Q2_K (q2_k_panels.cpp): one 256-value block of 16 rows: word i of each row's 16 scale
// bytes, qs[h][c][r] = qs bytes 32h + 4c..+3 of row r, d, dmin.
struct Q2_KPanel {
  uint32_t scales[4][kPanelRows];
  uint8_t qs[2][8][kPanelRows][4];
  uint16_t d[kPanelRows], dmin[kPanelRows];
};
static_assert(sizeof(Q2_KPanel) == kPanelRows * sizeof(minfer_block_q2_k), "a panel block is its rows' blocks, moved");

// Q3_K (q3_k_panels.cpp): one 256-value block of 16 rows: hmask[c][r] = hmask bytes 4c..+3
// of row r, qs[h][c][r] = qs bytes 32h + 4c..+3, word i of each row's 12 scale bytes, d.
struct Q3_KPanel {
  uint8_t hmask[8][kPanelRows][4];
  uint8_t qs[2][8][kPanelRows][4];
  uint32_t scales[3][kPanelRows];
  uint16_t d[kPanelRows];
};
static_assert(sizeof(Q3_KPanel) == kPanelRows * sizeof(minfer_block_q3_k), "a panel block is its rows' blocks, moved");

// Q5_K (q5_k_panels.cpp): Q4_K's panel with the fifth bits between the scales and qs:
// qh[c][r] = qh bytes 4c..+3 of row r (bit j of byte l: value l of sub-block j).
struct Q5_KPanel {
  uint16_t d[kPanelRows], dmin[kPanelRows];
  uint32_t scales[3][kPanelRows];
  uint8_t qh[8][kPanelRows][4];
  uint8_t qs[4][8][kPanelRows][4];
};
static_assert(sizeof(Q5_KPanel) == kPanelRows * sizeof(minfer_block_q5_k), "a panel block is its rows' blocks, moved");

// Q6_K (q6_k_panels.cpp): one 256-value block of 16 rows: the rows' d, scale s of each row,
// then ql[h][q][c][r] = ql bytes 64h + 32q + 4c..+3 of row r and qh[h][c][r] = qh bytes 32h +
// 4c..+3 (the low four and the high two bits of values 128h + 32q' + 4c.. for the four q').
struct Q6_KPanel {
  uint16_t d[kPanelRows];
  int8_t scales[16][kPanelRows];
  uint8_t ql[2][2][8][kPanelRows][4];
  uint8_t qh[2][8][kPanelRows][4];
};
static_assert(sizeof(Q6_KPanel) == kPanelRows * sizeof(minfer_block_q6_k), "a panel block is its rows' blocks, moved");

// In place, one panel at a time through a copy of its bytes: move(row block, panel block, row,
// to_panels) moves one row's block into or out of the panel's.
template <class Block, class Panel, int kValues, class Move>
void convert_panels(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool, Move move) {
  const int64_t nb = k / kValues, panel_bytes = kPanelRows * nb * int64_t(sizeof(Block));
  const auto some = [&](int64_t p0, int64_t p1, int) {
    std::vector<uint8_t> copy(static_cast<size_t>(panel_bytes));
    for (int64_t p = p0; p < p1; ++p) {
      uint8_t *at = w + p * panel_bytes;
      std::memcpy(copy.data(), at, size_t(panel_bytes));
      auto *rows = reinterpret_cast<Block *>(to_panels ? copy.data() : at);
      auto *panel = reinterpret_cast<Panel *>(to_panels ? at : copy.data());
      for (int64_t b = 0; b < nb; ++b)
        for (int r = 0; r < kPanelRows; ++r) move(rows[r * nb + b], panel[b], r, to_panels);
    }
  };
  if (pool) pool->run(m / kPanelRows, some);
  else some(0, m / kPanelRows, 0);
}

// One panel's rows back in GGUF order, out of place (16 rows of k values into `rows`): for the
// kernels that read rows (the AMX tiles' decoders) from a weight held in panels.
template <class Block, class Panel, int kValues, class Move>
void panel_to_rows(const uint8_t *panel, int64_t k, uint8_t *rows, Move move) {
  const int64_t nb = k / kValues;
  auto *out = reinterpret_cast<Block *>(rows);
  auto *pb = reinterpret_cast<Panel *>(const_cast<uint8_t *>(panel));  // read only: move(..., false) writes the row
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < kPanelRows; ++r) move(out[r * nb + b], pb[b], r, false);
}

// A panel kernel's software prefetch at a panel block of `bytes`: the bytes `near` ahead into
// L1 and the same span kL2Ahead ahead into L2. Measured (DRAM-bound one-token 2048 x 524288
// matmul, Xeon, 2 threads, 27.3 GB/s streaming): the near one alone 19.5 GB/s on Q4_K and
// 18.8 on Q6_K; with the L2 one 8 KiB ahead 23.7 and ~21 (4 KiB: no gain; 32 KiB: slower).
inline constexpr int kL2Ahead = 8192;
inline void prefetch_panel_block(const void *at, int bytes, int near) {
  const char *c = static_cast<const char *>(at);
  // Unrolled (bytes is a panel block's constant size): as a loop each line cost three more
  // instructions than its two prefetches.
#pragma GCC unroll 64
  for (int l = 0; l < bytes; l += 64) {
    _mm_prefetch(c + near + l, _MM_HINT_T0);
    _mm_prefetch(c + kL2Ahead + l, _MM_HINT_T1);
  }
}

// The weight types panels exist for; those an isa reads as panels (Q2_K, Q3_K, Q5_K, Q6_K and
// Q8_0: AVX-512 only, see q6_k_panels.cpp and q8_0_panels.cpp); and whether a [k, m] weight
// can be held so: whole panels.
inline bool panel_dtype(int32_t dtype) {
  return dtype == MINFER_DTYPE_Q4_0 || dtype == MINFER_DTYPE_Q4_1 || dtype == MINFER_DTYPE_Q8_0 || dtype == MINFER_DTYPE_Q5_0 || dtype == MINFER_DTYPE_Q5_1 ||
         dtype == MINFER_DTYPE_Q2_K || dtype == MINFER_DTYPE_Q3_K || dtype == MINFER_DTYPE_Q4_K ||
         dtype == MINFER_DTYPE_Q5_K || dtype == MINFER_DTYPE_Q6_K || dtype == MINFER_DTYPE_IQ4_NL || dtype == MINFER_DTYPE_IQ4_XS;
}
// AMX machines read the panels with the AVX-512 VNNI kernels below kAmxMinTokens tokens and
// with the tiles above it (amx_matmul: Q4_0, Q4_K and Q6_K decoded from the panels, the other
// types turned back into rows a panel at a time).
inline Isa panel_isa(Isa isa) { return isa == Isa::Amx ? Isa::Avx512Vnni : isa; }
inline bool panels_take(int32_t dtype, Isa isa) {
  isa = panel_isa(isa);
  return (isa == Isa::Avx512Vnni && panel_dtype(dtype)) || (avx2_family(isa) && (dtype == MINFER_DTYPE_Q4_0 || dtype == MINFER_DTYPE_Q4_1 || dtype == MINFER_DTYPE_Q5_0 || dtype == MINFER_DTYPE_Q5_1 ||
                                 dtype == MINFER_DTYPE_Q4_K || dtype == MINFER_DTYPE_IQ4_NL || dtype == MINFER_DTYPE_IQ4_XS));
}
inline bool panels_fit(int32_t dtype, int64_t k, int64_t m) {
  return panel_dtype(dtype) && k % minfer_dtype_info(dtype).block_values == 0 && m % kPanelRows == 0 && m > 0;
}

// In place: m rows of k values (GGUF order) to panels, or back.
void q4_0_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q4_1_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q5_0_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q5_1_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q4_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q2_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q3_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q5_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q6_k_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void iq4_nl_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void q8_0_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
void iq4_xs_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool);
inline void repack_panels(int32_t dtype, uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  (dtype == MINFER_DTYPE_Q4_K   ? q4_k_convert
   : dtype == MINFER_DTYPE_Q2_K ? q2_k_convert
   : dtype == MINFER_DTYPE_Q3_K ? q3_k_convert
   : dtype == MINFER_DTYPE_Q5_K ? q5_k_convert
   : dtype == MINFER_DTYPE_Q6_K ? q6_k_convert
   : dtype == MINFER_DTYPE_Q4_1 ? q4_1_convert
   : dtype == MINFER_DTYPE_Q5_0 ? q5_0_convert
   : dtype == MINFER_DTYPE_Q5_1 ? q5_1_convert
   : dtype == MINFER_DTYPE_IQ4_NL ? iq4_nl_convert
   : dtype == MINFER_DTYPE_Q8_0 ? q8_0_convert
   : dtype == MINFER_DTYPE_IQ4_XS ? iq4_xs_convert
                                : q4_0_convert)(w, k, m, to_panels, pool);
}
void q4_0_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q4_1_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q5_0_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q5_1_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q4_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q2_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q3_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q5_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q6_k_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void iq4_nl_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void q8_0_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
void iq4_xs_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows);
inline void panel_rows(int32_t dtype, const uint8_t *panel, int64_t k, uint8_t *rows) {
  (dtype == MINFER_DTYPE_Q4_K   ? q4_k_panel_rows
   : dtype == MINFER_DTYPE_Q2_K ? q2_k_panel_rows
   : dtype == MINFER_DTYPE_Q3_K ? q3_k_panel_rows
   : dtype == MINFER_DTYPE_Q5_K ? q5_k_panel_rows
   : dtype == MINFER_DTYPE_Q6_K ? q6_k_panel_rows
   : dtype == MINFER_DTYPE_Q4_1 ? q4_1_panel_rows
   : dtype == MINFER_DTYPE_Q5_0 ? q5_0_panel_rows
   : dtype == MINFER_DTYPE_Q5_1 ? q5_1_panel_rows
   : dtype == MINFER_DTYPE_IQ4_NL ? iq4_nl_panel_rows
   : dtype == MINFER_DTYPE_Q8_0 ? q8_0_panel_rows
   : dtype == MINFER_DTYPE_IQ4_XS ? iq4_xs_panel_rows
                                : q4_0_panel_rows)(panel, k, rows);
}

// Tokens [0, tokens) in passes of at most kPass: pass(tag, t0), tag's value the pass's count.
template <int kPass, class F>
void in_passes(int64_t tokens, F &&pass) {
  for (int64_t t0 = 0; t0 < tokens; t0 += kPass)
    by_count<kPass>(int(std::min<int64_t>(kPass, tokens - t0)), [&](auto tag) { pass(tag, t0); });
}

// The AVX-512 panel kernels' passes over `tokens`, at most kVnniPanelTokens a pass (two int32
// sums and an accumulator a token in the registers): kernel(tag, panel blocks, blocks, a, kb,
// y, m), tag's value the pass's count. The AVX-512-only types refuse another isa.
inline constexpr int kVnniPanelTokens = 8;
template <class Panel, class Kernel>
void vnni_panel_passes(const char *type, Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m,
                       Kernel kernel) {
  if (isa != Isa::Avx512Vnni)
    throw sdk::Error(MINFER_ERR_INTERNAL, std::string(type) + " panels are read by the AVX-512 VNNI kernel only (panels_take)");
  const auto *pb = reinterpret_cast<const Panel *>(panel);
  const int64_t nb = k / 256, kb = k / 32;
  in_passes<kVnniPanelTokens>(tokens, [&](auto tag, int64_t t0) { kernel(tag, pb, nb, a + t0 * kb, kb, y + t0 * m, m); });
}

// What multiplies a token's d * sum(x) in the 32-value panels' passes: -offset * d for Q4_0
// and Q5_0, the rows' minima for Q4_1 and Q5_1 (x = d q + m); 256 bits: the 8 rows from `row`.
template <class Panel>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))) __m512 block32_mins(const Panel &p, __m512 d) {
  if constexpr (requires { p.m; }) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p.m)));
  else return _mm512_mul_ps(d, _mm512_set1_ps(-Panel::kOffset));
}
template <class Panel>
__attribute__((target("avx2,fma,f16c"))) __m256 block32_mins(const Panel &p, __m256 d, int row) {
  if constexpr (requires { p.m; }) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p.m + row)));
  else return _mm256_mul_ps(d, _mm256_set1_ps(-Panel::kOffset));
}

// The AVX-512 kernel of the 32-value panels (Q4_0, Q4_1, Q5_0, Q5_1): Unit::pieces gives the 16 rows'
// unsigned values of a block, lo[c] the low nibbles' piece c (values 4c..4c+3) and hi[c] the
// high ones' (16 + 4c..), and block32_mins what multiplies each token's d * sum; each pass of
// T tokens unpacks a block once.
// Per (16 rows, block, token): 8 vpdpbusd in two chains (their latencies overlap) and two FMAs.
template <class Unit, int T>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))) void block32_dots_vnni(const typename Unit::Panel *p,
                                                                                                       int64_t nb, const ActBlock *a,
                                                                                                       int64_t kb, float *y, int64_t m) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_panel_block(p + b, int(sizeof(typename Unit::Panel)), 2048);
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    const __m512 mn = block32_mins(p[b], d);
    __m512i lo[4], hi[4];
    Unit::pieces(p[b], lo, hi);
    for (int t = 0; t < T; ++t) {
      const ActBlock &x = a[t * kb + b];
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      for (int c = 0; c < 4; ++c) {
        s0 = _mm512_dpbusd_epi32(s0, lo[c], _mm512_broadcastd_epi32(_mm_loadu_si32(x.qs + 4 * c)));
        s1 = _mm512_dpbusd_epi32(s1, hi[c], _mm512_broadcastd_epi32(_mm_loadu_si32(x.qs + 16 + 4 * c)));
      }
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(d, _mm512_set1_ps(x.d)), acc[t]);
      acc[t] = _mm512_fmadd_ps(mn, _mm512_set1_ps(x.d_sum), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * m, acc[t]);
}

// The AVX-512 kernel of the panels whose scales cover 16 values (Q2_K, Q3_K; Q6_K from three
// tokens): for activation block j of a 256-value block, Unit::scales gives d * scale (ds) of
// sub-blocks 2j and 2j + 1 and, for a unit with mins (kOffset 0), dm = dmin * min; the others'
// values sit kOffset above zero. Unit::values gives the 16 rows' 4 unsigned values of piece c
// (values 4c..4c+3 of the block; pieces 0-3 are sub-block 2j). Per (16 rows, 32 values,
// token): 8 vpdpbusd and four FMAs.
template <class Unit, int T>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))) void sub16_dots_vnni(const typename Unit::Panel *p, int64_t nb,
                                                                                                     const ActBlock *a, int64_t kb, float *y,
                                                                                                     int64_t m) {
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_panel_block(p + b, int(sizeof(typename Unit::Panel)), 2 * int(sizeof(typename Unit::Panel)));
    const typename Unit::Block blk(p[b]);
    for (int j = 0; j < 8; ++j) {
      __m512 ds[2], dm[2];
      blk.scales(p[b], j, ds, dm);
      // One sub-block (pieces 4i..4i+3) at a time into T int32 sums, its pieces unrolled so
      // the sums stay in registers: with both sub-blocks' sums live and the piece loop rolled,
      // the compiler moved and spilled them around every vpdpbusd (Q6_K 4864 x 896 at 128
      // tokens took 2.3x Q4_0's time).
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        __m512i s[T];
        for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 4 * i; c < 4 * i + 4; ++c) {
          const __m512i v = Unit::values(p[b], j, c);
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t)
            s[t] = _mm512_dpbusd_epi32(s[t], v, _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(a[t * kb + b * 8 + j].qs + 4 * c)));
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const ActBlock &x = a[t * kb + b * 8 + j];
          const float sum = i == 0 ? x.d_sum_lo : x.d_sum - x.d_sum_lo;
          const __m512 si = _mm512_cvtepi32_ps(s[t]);
          if constexpr (Unit::kOffset != 0) {  // ds (d_x dot(v, x) - offset d_x sum(x))
            acc[t] = _mm512_fmadd_ps(ds[i], _mm512_fmadd_ps(_mm512_set1_ps(x.d), si, _mm512_set1_ps(-float(Unit::kOffset) * sum)), acc[t]);
          } else {  // ds d_x dot(v, x) - dm d_x sum(x)
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(ds[i], _mm512_set1_ps(x.d)), si, acc[t]);
            acc[t] = _mm512_fnmadd_ps(dm[i], _mm512_set1_ps(sum), acc[t]);
          }
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * m, acc[t]);
}

// Q4_K's and Q5_K's six-bit scales and mins of 16 rows (each row's three scale words, as the
// row dots' q4_k_scales_simd decodes them), for sub-blocks 2g and 2g + 1: d * sc and dmin * m.
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw"))) inline void k4_scales_16(const uint32_t (&scales)[3][kPanelRows], __m512 d,
                                                                                            __m512 dmin, int g, __m512 (&dsc)[2], __m512 (&dm)[2]) {
  const __m512i six = _mm512_set1_epi32(0x3f3f3f3f), four = _mm512_set1_epi32(0x0f0f0f0f);
  const __m512i two = _mm512_set1_epi32(0x03030303), byte = _mm512_set1_epi32(0xff);
  const __m512i u0 = _mm512_loadu_si512(scales[0]), u1 = _mm512_loadu_si512(scales[1]), u2 = _mm512_loadu_si512(scales[2]);
  // sub-blocks 0-3's fields a byte each in the first two words; 4-7's rebuilt from the third
  const __m512i scw = g < 2 ? _mm512_and_si512(u0, six)
                            : _mm512_or_si512(_mm512_and_si512(u2, four), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), two), 4));
  const __m512i mw = g < 2 ? _mm512_and_si512(u1, six)
                           : _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), four),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), two), 4));
  for (int i = 0; i < 2; ++i) {  // sub-block 2g + i: byte 2(g % 2) + i
    const int sh = 16 * (g & 1) + 8 * i;
    dsc[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(scw, sh), byte)));
    dm[i] = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(mw, sh), byte)));
  }
}

// The AVX-512 kernel of Q4_K's and Q5_K's panels. Per (16 rows, 256 values, token): 64
// vpdpbusd against broadcast activations and four FMAs per sub-block pair; the 16 rows'
// six-bit scales and mins decoded as vectors (k4_scales_16; the row dots spent ~135
// instructions per row and block, compute-bound at half the bytes' rate). Sub-block j of a
// row: d sc_j d_x dot(q, x) - dmin m_j d_x sum(x). Q5_K's fifth bits: value l of sub-block j
// has bit j of qh[l], and qh's piece c serves every sub-block of the block, so sub-blocks 2g
// and 2g + 1 take bits 2g and 2g + 1 of it to bit 4 of their nibbles.
template <class Panel, int T>
__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))) void k4_dots_vnni(const Panel *p, int64_t nb, const ActBlock *a,
                                                                                                  int64_t kb, float *y, int64_t m) {
  constexpr bool kFifth = requires(const Panel &q) { q.qh; };
  const __m512i low = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_panel_block(p + b, int(sizeof(Panel)), (kFifth ? 1 : 2) * int(sizeof(Panel)));
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].d)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].dmin)));
    for (int g = 0; g < 4; ++g) {
      __m512 dsc[2], dm[2];
      k4_scales_16(p[b].scales, d, dmin, g, dsc, dm);
      // Sub-block 2g (the low nibbles), then 2g + 1 (the high ones), each into T int32 sums
      // with its pieces unrolled: with both sub-blocks' sums live (2T beside T accumulators) the
      // compiler kept the piece loop rolled and the sums on the stack, a load and a store around
      // every vpdpbusd (Q4_K 4864 x 896 at 128 tokens took 1.45x Q4_0's time). Each piece is
      // loaded twice, the second time from L1.
#pragma GCC unroll 2
      for (int i = 0; i < 2; ++i) {
        __m512i s[T];
        for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          const __m512i v = _mm512_loadu_si512(p[b].qs[g][c]);
          __m512i q = _mm512_and_si512(i == 0 ? v : _mm512_srli_epi16(v, 4), low);
          if constexpr (kFifth) {  // qh bit 2g + i to bit 4 (down to bit 0, then up: no branch on g); 16-bit
            // shifts, each byte's own bit kept by the mask
            const __m512i h = _mm512_slli_epi16(_mm512_srli_epi16(_mm512_loadu_si512(p[b].qh[c]), 2 * g + i), 4);
            q = _mm512_ternarylogic_epi32(q, h, bit4, 0xF8);  // A | (B & C)
          }
#pragma GCC unroll 8
          for (int t = 0; t < T; ++t)
            s[t] = _mm512_dpbusd_epi32(s[t], q, _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(a[t * kb + b * 8 + 2 * g + i].qs + 4 * c)));
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const ActBlock &x = a[t * kb + b * 8 + 2 * g + i];
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(dsc[i], _mm512_set1_ps(x.d)), acc[t]);
          acc[t] = _mm512_fnmadd_ps(dm[i], _mm512_set1_ps(x.d_sum), acc[t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * m, acc[t]);
}

// One integer step of the 256-bit panel passes (Q4_0, Q4_K), s += w x summed by 4 values:
// AVX2 adds vpmaddubsw's int16 pair sums (the passes widen them with widen_i16 once a
// sub-block, while int16 cannot overflow), AVX-VNNI's vpdpbusd sums straight into int32.
__attribute__((target("avx2"))) inline __m256i dot_step_avx2(__m256i s, __m256i w, __m256i x) {
  return _mm256_add_epi16(s, _mm256_maddubs_epi16(w, x));
}
__attribute__((target("avx2"))) inline __m256i widen_i16(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
__attribute__((target("avx2,avxvnni"))) inline __m256i dot_step_avxvnni(__m256i s, __m256i w, __m256i x) {
  return _mm256_dpbusd_avx_epi32(s, w, x);
}
__attribute__((target("avx2"))) inline __m256i widen_i32(__m256i s) { return s; }

// One panel (16 rows of k values) dotted with `tokens` tokens' activations (quantized by
// quantize_activations, k / 32 blocks a token): y[t * m + r] for row r; isa Avx2 or
// Avx512Vnni (Q6_K: Avx512Vnni; panel_isa maps Amx).
void q4_0_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q4_1_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q5_0_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q5_1_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q4_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q2_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q3_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q5_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q6_k_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void iq4_nl_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void q8_0_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
void iq4_xs_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);
// IQ4_NL's or IQ4_XS's panels under AVX2 (and AVX-VNNI for IQ4_XS): the table's signed values,
// |w| x sign(a, w) (iq4_panels.cpp).
void iq4_panel_dots_avx2(int32_t dtype, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m);

// A matmul over panels of m rows each: segment s is a matrix's panels and its tokens
// [first, first + tokens) of a, written to y (tokens x m). A dense matmul is one segment,
// MATMUL_ID's chosen experts one each: all of them one pass of the pool, panels handed out
// four at a time.
struct PanelSegment {
  const uint8_t *panels;
  int64_t first, tokens;
  float *y;
};
void panel_matmul(int32_t dtype, Isa isa, int64_t k, int64_t m, const ActBlock *a, std::span<const PanelSegment> segs, ThreadPool &pool);

}  // namespace minfer::cpu
