#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "panels.hpp"

namespace minfer::cpu {
namespace {

// A row's fifth bits, regrouped for the panel's pieces: bit l of the GGUF word is value l's
// (low nibbles l < 16, high nibbles l >= 16); piece c of qs holds values 4c + j (low) and
// 16 + 4c + j (high) in its byte j, so byte j of the panel's word takes the fifth bits of
// value 4c + j at bit c and of value 16 + 4c + j at bit 4 + c (c = 0..3). A kernel then moves
// a piece's bits to bit 4 of each byte with one 16-bit shift and one mask, no byte shuffles.
uint32_t fifth_bits_to_panel(uint32_t h) {
  uint32_t w = 0;
  for (int j = 0; j < 4; ++j)
    for (int c = 0; c < 4; ++c) {
      w |= ((h >> (4 * c + j)) & 1u) << (8 * j + c);
      w |= ((h >> (16 + 4 * c + j)) & 1u) << (8 * j + 4 + c);
    }
  return w;
}
uint32_t fifth_bits_to_row(uint32_t w) {
  uint32_t h = 0;
  for (int j = 0; j < 4; ++j)
    for (int c = 0; c < 4; ++c) {
      h |= ((w >> (8 * j + c)) & 1u) << (4 * c + j);
      h |= ((w >> (8 * j + 4 + c)) & 1u) << (16 + 4 * c + j);
    }
  return h;
}

// A row's block into its panel block or back: the scale (and Q5_1's minimum), the fifth bits,
// the four pieces.
template <class Block, class Panel>
void move_q5(Block &row, Panel &pb, int r, bool to_panels) {
  uint32_t h;
  if constexpr (std::is_same_v<Block, minfer_block_q5_1>) {
    if (to_panels) pb.m[r] = row.m;
    else row.m = pb.m[r];
  }
  if (to_panels) {
    pb.d[r] = row.d;
    std::memcpy(&h, row.qh, 4);
    pb.qh[r] = fifth_bits_to_panel(h);
    for (int c = 0; c < 4; ++c) std::memcpy(pb.qs[c][r], row.qs + 4 * c, 4);
  } else {
    row.d = pb.d[r];
    h = fifth_bits_to_row(pb.qh[r]);
    std::memcpy(row.qh, &h, 4);
    for (int c = 0; c < 4; ++c) std::memcpy(row.qs + 4 * c, pb.qs[c][r], 4);
  }
}

#define MINFER_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MINFER_VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define MINFER_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

// ---- Dot products straight from the panels ------------------------------------------------
// Q4_0's panel kernels (q4_0_panels.cpp) with a fifth bit a value: unsigned 0..31, Q5_0's 16
// above zero (dot(v - 16, x) = dot(v, x) - 16 sum(x), the sum from the activation block),
// Q5_1's plus its row's minimum (m sum(x)). The row dots they replace spent most of their
// instructions spreading the 32 fifth bits of one row over 32 bytes; here one load of 16
// rows' regrouped words serves the block's four pieces.

// AVX-512: block32_dots_vnni (panels.hpp) on these pieces: (nibbles & 0x0f) | fifth bit, one
// ternary-logic op each (0xEA: (A & B) | C); the shifts are 16-bit, but each source bit stays
// within its byte (bits c and 4 + c to bit 4).
template <class P>
struct Q5Unit {
  using Panel = P;
  MINFER_VNNI512 static void pieces(const Panel &p, __m512i (&lo)[4], __m512i (&hi)[4]) {
    const __m512i low = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10), h = _mm512_loadu_si512(p.qh);
    const __m512i q[4] = {_mm512_loadu_si512(p.qs[0]), _mm512_loadu_si512(p.qs[1]), _mm512_loadu_si512(p.qs[2]), _mm512_loadu_si512(p.qs[3])};
    lo[0] = _mm512_ternarylogic_epi32(q[0], low, _mm512_and_si512(_mm512_slli_epi16(h, 4), bit4), 0xEA);
    lo[1] = _mm512_ternarylogic_epi32(q[1], low, _mm512_and_si512(_mm512_slli_epi16(h, 3), bit4), 0xEA);
    lo[2] = _mm512_ternarylogic_epi32(q[2], low, _mm512_and_si512(_mm512_slli_epi16(h, 2), bit4), 0xEA);
    lo[3] = _mm512_ternarylogic_epi32(q[3], low, _mm512_and_si512(_mm512_slli_epi16(h, 1), bit4), 0xEA);
    hi[0] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(q[0], 4), low, _mm512_and_si512(h, bit4), 0xEA);
    hi[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(q[1], 4), low, _mm512_and_si512(_mm512_srli_epi16(h, 1), bit4), 0xEA);
    hi[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(q[2], 4), low, _mm512_and_si512(_mm512_srli_epi16(h, 2), bit4), 0xEA);
    hi[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(q[3], 4), low, _mm512_and_si512(_mm512_srli_epi16(h, 3), bit4), 0xEA);
  }
};

// 8 rows at a time (the second half reads the panel block from L2), a version per target (a
// macro: each needs its own), DOT and WIDEN the steps of panels.hpp. The fifth bits' two
// shifted copies move one bit a piece (running shifts: the loop over pieces stays rolled, as
// in Q4_0's AVX2 pass, so the sums stay in registers). AVX2's int16 pair sums reach
// 2 * 31 * 127 a vpmaddubsw: four fit (< 2^15), so they are widened and scaled every two
// pieces.
#define MINFER_Q5_0_PANEL_DOTS_256(NAME, TARGET, DOT, WIDEN)                                                                   \
  template <class Panel, int T>                                                                                                 \
  TARGET void NAME(const Panel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {                           \
    const __m256i low = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);                                                \
    for (int half = 0; half < 2; ++half) {                                                                                      \
      __m256 acc[T];                                                                                                            \
      for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();                                                                 \
      for (int64_t b = 0; b < nb; ++b) {                                                                                        \
        if (half == 0) prefetch_panel_block(p + b, int(sizeof(Panel)), 2048);                                                   \
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].d + 8 * half)));                \
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].qh + 8 * half));                          \
        __m256i hl = _mm256_slli_epi16(h, 4), hh = h; /* piece c: bit c, and bit 4 + c, at bit 4 */                            \
        _Pragma("GCC unroll 1") for (int pair = 0; pair < 2; ++pair) {                                                          \
          __m256i s[T];                                                                                                         \
          for (int t = 0; t < T; ++t) s[t] = _mm256_setzero_si256();                                                            \
          for (int c = 2 * pair; c < 2 * pair + 2; ++c) {                                                                       \
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].qs[c][8 * half]));                     \
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(hl, bit4));                           \
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), _mm256_and_si256(hh, bit4));     \
            hl = _mm256_srli_epi16(hl, 1), hh = _mm256_srli_epi16(hh, 1);                                                       \
            for (int t = 0; t < T; ++t) {                                                                                       \
              const ActBlock &x = a[t * kb + b];                                                                                \
              s[t] = DOT(DOT(s[t], lo, _mm256_broadcastd_epi32(_mm_loadu_si32(x.qs + 4 * c))), hi,                              \
                         _mm256_broadcastd_epi32(_mm_loadu_si32(x.qs + 16 + 4 * c)));                                           \
            }                                                                                                                   \
          }                                                                                                                     \
          for (int t = 0; t < T; ++t)                                                                                           \
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(WIDEN(s[t])), _mm256_mul_ps(d, _mm256_set1_ps(a[t * kb + b].d)), acc[t]); \
        }                                                                                                                       \
        const __m256 mn = block32_mins(p[b], d, 8 * half);                                                                        \
        for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(mn, _mm256_set1_ps(a[t * kb + b].d_sum), acc[t]);                  \
      }                                                                                                                         \
      for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * m + 8 * half, acc[t]);                                               \
    }                                                                                                                           \
  }
MINFER_Q5_0_PANEL_DOTS_256(panel_dots_avx2, MINFER_AVX2, dot_step_avx2, widen_i16)
MINFER_Q5_0_PANEL_DOTS_256(panel_dots_avxvnni, MINFER_AVXVNNI, dot_step_avxvnni, widen_i32)
#undef MINFER_Q5_0_PANEL_DOTS_256

// Prompts and batches on 256 bits: the pass above unpacks a block for every 4 tokens, which
// made a 128-token prompt slower than the tiled GEMM it replaced (896 x 4864, AVX2, 2 threads:
// 3.9-4.8 ms against 3.2-3.7). Here a block-half's 8 unpacked vectors go to the stack once
// (L1) for 8 tokens, each token reloading them: only its accumulator lives across tokens.
#define MINFER_Q5_0_PANEL_DOTS_256_MANY(NAME, TARGET, DOT, WIDEN)                                                              \
  template <class Panel, int T>                                                                                                 \
  TARGET void NAME(const Panel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {                           \
    const __m256i low = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);                                                \
    for (int half = 0; half < 2; ++half) {                                                                                      \
      __m256 acc[T];                                                                                                            \
      for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();                                                                 \
      for (int64_t b = 0; b < nb; ++b) {                                                                                        \
        if (half == 0) prefetch_panel_block(p + b, int(sizeof(Panel)), 2048);                                                   \
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].d + 8 * half)));                \
        const __m256 mn = block32_mins(p[b], d, 8 * half);                                                                        \
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].qh + 8 * half));                          \
        alignas(32) __m256i w[8]; /* piece c's low and high values at 2c and 2c + 1 */                                         \
        for (int c = 0; c < 4; ++c) {                                                                                           \
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].qs[c][8 * half]));                       \
          w[2 * c] = _mm256_or_si256(_mm256_and_si256(v, low), _mm256_and_si256(_mm256_slli_epi16(h, 4 - c), bit4));            \
          w[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low), _mm256_and_si256(_mm256_srli_epi16(h, c), bit4)); \
        }                                                                                                                       \
        for (int t = 0; t < T; ++t) {                                                                                           \
          const ActBlock &x = a[t * kb + b];                                                                                    \
          __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256(); /* pieces 0-1 and 2-3: int16 cannot overflow */    \
          for (int c = 0; c < 2; ++c) {                                                                                         \
            s0 = DOT(DOT(s0, w[2 * c], _mm256_broadcastd_epi32(_mm_loadu_si32(x.qs + 4 * c))), w[2 * c + 1],                   \
                     _mm256_broadcastd_epi32(_mm_loadu_si32(x.qs + 16 + 4 * c)));                                               \
            s1 = DOT(DOT(s1, w[2 * c + 4], _mm256_broadcastd_epi32(_mm_loadu_si32(x.qs + 4 * c + 8))), w[2 * c + 5],           \
                     _mm256_broadcastd_epi32(_mm_loadu_si32(x.qs + 16 + 4 * c + 8)));                                           \
          }                                                                                                                     \
          const __m256i s = _mm256_add_epi32(WIDEN(s0), WIDEN(s1));                                                             \
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(x.d)), acc[t]);                      \
          acc[t] = _mm256_fmadd_ps(mn, _mm256_set1_ps(x.d_sum), acc[t]);                                                        \
        }                                                                                                                       \
      }                                                                                                                         \
      for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * m + 8 * half, acc[t]);                                               \
    }                                                                                                                           \
  }
MINFER_Q5_0_PANEL_DOTS_256_MANY(panel_dots_many_avx2, MINFER_AVX2, dot_step_avx2, widen_i16)
MINFER_Q5_0_PANEL_DOTS_256_MANY(panel_dots_many_avxvnni, MINFER_AVXVNNI, dot_step_avxvnni, widen_i32)
#undef MINFER_Q5_0_PANEL_DOTS_256_MANY

// Tokens a pass: as Q4_0's for AVX-512; on 256 bits up to 4 tokens in the pass that keeps its
// sums in registers (an int16 or int32 sum and an accumulator a token beside the fifth bits'
// two copies), more in passes of 8 through the stack.
constexpr int kPanelVnniTokens = 8, kPanelAvx2FewTokens = 4, kPanelAvx2ManyTokens = 8;

template <class Panel>
void q5_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  const auto *pb = reinterpret_cast<const Panel *>(panel);
  const int64_t kb = k / 32;
  if (isa == Isa::Avx512Vnni)
    return in_passes<kPanelVnniTokens>(tokens, [&](auto tag, int64_t t0) { block32_dots_vnni<Q5Unit<Panel>, decltype(tag)::value>(pb, kb, a + t0 * kb, kb, y + t0 * m, m); });
  const bool vnni = isa == Isa::AvxVnni;
  if (tokens > kPanelAvx2FewTokens)
    return in_passes<kPanelAvx2ManyTokens>(tokens, [&](auto tag, int64_t t0) {
      constexpr int kT = decltype(tag)::value;
      (vnni ? panel_dots_many_avxvnni<Panel, kT> : panel_dots_many_avx2<Panel, kT>)(pb, kb, a + t0 * kb, kb, y + t0 * m, m);
    });
  in_passes<kPanelAvx2FewTokens>(tokens, [&](auto tag, int64_t t0) {
    constexpr int kT = decltype(tag)::value;
    (vnni ? panel_dots_avxvnni<Panel, kT> : panel_dots_avx2<Panel, kT>)(pb, kb, a + t0 * kb, kb, y + t0 * m, m);
  });
}

}  // namespace

void q5_0_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  q5_panel_dots<Q5_0Panel>(isa, panel, k, a, tokens, y, m);
}
void q5_1_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  q5_panel_dots<Q5_1Panel>(isa, panel, k, a, tokens, y, m);
}

void q5_0_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) {
  panel_to_rows<minfer_block_q5_0, Q5_0Panel, 32>(panel, k, rows, move_q5<minfer_block_q5_0, Q5_0Panel>);
}
void q5_1_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) {
  panel_to_rows<minfer_block_q5_1, Q5_1Panel, 32>(panel, k, rows, move_q5<minfer_block_q5_1, Q5_1Panel>);
}

void q5_0_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q5_0, Q5_0Panel, 32>(w, k, m, to_panels, pool, move_q5<minfer_block_q5_0, Q5_0Panel>);
}
void q5_1_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q5_1, Q5_1Panel, 32>(w, k, m, to_panels, pool, move_q5<minfer_block_q5_1, Q5_1Panel>);
}

}  // namespace minfer::cpu
