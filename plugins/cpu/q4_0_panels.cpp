#include "panels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

// A row's block into its panel block or back: the scale (and Q4_1's minimum), then its four
// 4-byte pieces.
template <class Block, class Panel>
void move_q4(Block &row, Panel &pb, int r, bool to_panels) {
  if constexpr (std::is_same_v<Block, minfer_block_q4_1>) {
    if (to_panels) pb.m[r] = row.m;
    else row.m = pb.m[r];
  }
  if (to_panels) {
    pb.d[r] = row.d;
    for (int c = 0; c < 4; ++c) std::memcpy(pb.qs[c][r], row.qs + 4 * c, 4);
  } else {
    row.d = pb.d[r];
    for (int c = 0; c < 4; ++c) std::memcpy(row.qs + 4 * c, pb.qs[c][r], 4);
  }
}

#define MINFER_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MINFER_VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define MINFER_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

// ---- Dot products straight from the panels ------------------------------------------------
// Each (16 rows, block, token) is 8 vpdpbusd against broadcast activations (AVX2: 8 vpmaddubsw
// on 8 rows, summed in int16: 8 * 2 * 15 * 127 < 2^15) and two FMAs; each block's nibbles are
// unpacked once per pass of 8 (AVX2: 4) tokens. This beats both the row dots and the tiled GEMM
// (which would unpack the panels into its packed copy first) at every token count measured
// (minfer-bench --op matmul q4_0, AMD EPYC Zen 4, 2 threads, us, panels | GEMM on panels | row
// dots before): 4864 x 14336 avx512vnni 1: 933-1278 | - | 1830-2560; 4: 1280-1456 | 4068 |
// 4240-4840; 8: 2421 | 6274; 128: 33510 | 41878; avx2 1: 1383 | 3584 | 2915; 4: 2851 | 4639 |
// 6946; 128: 72860 | 75137 | 87597; 896 x 4864 avx512vnni 128: 2070 | 3443.

// Whether a panel's nibbles are IQ4_NL's table indices (looked up once a pass by vpshufb).
template <class P>
constexpr bool kTablePanel = requires { P::kTable; };

// AVX-512: block32_dots_vnni (panels.hpp), the nibbles split once a pass.
template <class P>
struct Q4Unit {
  using Panel = P;
  MINFER_VNNI512 static void pieces(const Panel &p, __m512i (&lo)[4], __m512i (&hi)[4]) {
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(p.qs[c]);
      lo[c] = _mm512_and_si512(v, low);
      hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      if constexpr (kTablePanel<P>) lo[c] = _mm512_shuffle_epi8(iq4_table_u8_512(), lo[c]), hi[c] = _mm512_shuffle_epi8(iq4_table_u8_512(), hi[c]);
    }
  }
};

// Two versions of one pass (a macro, since each needs its own target), DOT and WIDEN the
// steps of panels.hpp: AVX2 sums pairs of products in int16 by vpmaddubsw, AVX-VNNI's
// vpdpbusd straight into int32. C_LOOP: a pragma for the loop over a block's four pieces.
#define MINFER_Q4_0_PANEL_DOTS_256(NAME, TARGET, DOT, WIDEN, C_LOOP)                                                                       \
  template <class Panel, int T>                                                                                                 \
  TARGET void NAME(const Panel *p, int64_t nb, const ActBlock *a, int64_t kb, float *y, int64_t m) {                           \
    const __m256i low = _mm256_set1_epi8(0x0f);                                                                               \
    for (int half = 0; half < 2; ++half) { /* 8 rows at a time; the second pass reads the panel from L2 */                    \
      __m256 acc[T];                                                                                                            \
      for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();                                                                 \
      for (int64_t b = 0; b < nb; ++b) {                                                                                        \
        if (half == 0) prefetch_panel_block(p + b, int(sizeof(Panel)), 2048);                                                   \
        __m256i s[T];                                                                                                           \
        for (int t = 0; t < T; ++t) s[t] = _mm256_setzero_si256();                                                              \
        C_LOOP                                                                                                                  \
        for (int c = 0; c < 4; ++c) {                                                                                           \
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p[b].qs[c][8 * half]));                       \
          __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);                           \
          if constexpr (kTablePanel<Panel>) /* AVX-VNNI's; AVX2: iq4_panels.cpp */                                               \
            lo = _mm256_shuffle_epi8(iq4_table_u8_256(), lo), hi = _mm256_shuffle_epi8(iq4_table_u8_256(), hi);                 \
          for (int t = 0; t < T; ++t) {                                                                                         \
            const ActBlock &x = a[t * kb + b];                                                                                  \
            s[t] = DOT(DOT(s[t], lo, _mm256_broadcastd_epi32(_mm_loadu_si32(x.qs + 4 * c))), hi,                                \
                       _mm256_broadcastd_epi32(_mm_loadu_si32(x.qs + 16 + 4 * c)));                                             \
          }                                                                                                                     \
        }                                                                                                                       \
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p[b].d + 8 * half)));                \
        const __m256 mn = block32_mins(p[b], d, 8 * half);                                                                        \
        for (int t = 0; t < T; ++t) {                                                                                           \
          const ActBlock &x = a[t * kb + b];                                                                                    \
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(WIDEN(s[t])), _mm256_mul_ps(d, _mm256_set1_ps(x.d)), acc[t]);             \
          acc[t] = _mm256_fmadd_ps(mn, _mm256_set1_ps(x.d_sum), acc[t]);                                                        \
        }                                                                                                                       \
      }                                                                                                                         \
      for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * m + 8 * half, acc[t]);                                               \
    }                                                                                                                           \
  }
MINFER_Q4_0_PANEL_DOTS_256(panel_dots_avx2, MINFER_AVX2, dot_step_avx2, widen_i16, _Pragma("GCC unroll 1"))
MINFER_Q4_0_PANEL_DOTS_256(panel_dots_avxvnni, MINFER_AVXVNNI, dot_step_avxvnni, widen_i32, )
#undef MINFER_Q4_0_PANEL_DOTS_256

// Tokens per pass of the direct kernels: what their registers hold (AVX-512: 8 weight vectors
// and 8 accumulators of 32; 256-bit: 5 integer and 5 float sums and one c's two weight vectors
// of 16 registers). The AVX2 pass keeps its c loop rolled: unrolled, the compiler hoisted all
// four c's unpacked weights and spilled the sums to the stack (104 stack operands at 4 tokens);
// rolled, 896 x 4864 at 128 tokens took 3.40-3.46 ms against 4.53-4.67 (2 threads, Xeon),
// 5 tokens a pass against 4 within noise for AVX2 and 2.47-2.51 against 2.56-2.60 for AVX-VNNI.
constexpr int kPanelVnniTokens = 8, kPanelAvx2Tokens = 5;

template <class Panel>
void q4_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  const auto *pb = reinterpret_cast<const Panel *>(panel);
  const int64_t kb = k / 32;
  if (isa == Isa::Avx512Vnni)
    return in_passes<kPanelVnniTokens>(tokens, [&](auto tag, int64_t t0) { block32_dots_vnni<Q4Unit<Panel>, decltype(tag)::value>(pb, kb, a + t0 * kb, kb, y + t0 * m, m); });
  const bool vnni = isa == Isa::AvxVnni;
  if constexpr (kTablePanel<Panel>)  // the values + 128 would saturate vpmaddubsw (2 x 241 x 127 > 2^15)
    if (!vnni) return iq4_panel_dots_avx2(MINFER_DTYPE_IQ4_NL, panel, k, a, tokens, y, m);
  in_passes<kPanelAvx2Tokens>(tokens, [&](auto tag, int64_t t0) {
    constexpr int kT = decltype(tag)::value;
    (vnni ? panel_dots_avxvnni<Panel, kT> : panel_dots_avx2<Panel, kT>)(pb, kb, a + t0 * kb, kb, y + t0 * m, m);
  });
}

}  // namespace

void q4_0_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  q4_panel_dots<Q4_0Panel>(isa, panel, k, a, tokens, y, m);
}
void q4_1_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  q4_panel_dots<Q4_1Panel>(isa, panel, k, a, tokens, y, m);
}

void iq4_nl_panel_dots(Isa isa, const uint8_t *panel, int64_t k, const ActBlock *a, int64_t tokens, float *y, int64_t m) {
  q4_panel_dots<IQ4_NLPanel>(isa, panel, k, a, tokens, y, m);
}

void q4_0_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) {
  panel_to_rows<minfer_block_q4_0, Q4_0Panel, 32>(panel, k, rows, move_q4<minfer_block_q4_0, Q4_0Panel>);
}
void q4_1_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) {
  panel_to_rows<minfer_block_q4_1, Q4_1Panel, 32>(panel, k, rows, move_q4<minfer_block_q4_1, Q4_1Panel>);
}

void iq4_nl_panel_rows(const uint8_t *panel, int64_t k, uint8_t *rows) {
  panel_to_rows<minfer_block_iq4_nl, IQ4_NLPanel, 32>(panel, k, rows, move_q4<minfer_block_iq4_nl, IQ4_NLPanel>);
}

void q4_0_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q4_0, Q4_0Panel, 32>(w, k, m, to_panels, pool, move_q4<minfer_block_q4_0, Q4_0Panel>);
}
void q4_1_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_q4_1, Q4_1Panel, 32>(w, k, m, to_panels, pool, move_q4<minfer_block_q4_1, Q4_1Panel>);
}

void iq4_nl_convert(uint8_t *w, int64_t k, int64_t m, bool to_panels, ThreadPool *pool) {
  convert_panels<minfer_block_iq4_nl, IQ4_NLPanel, 32>(w, k, m, to_panels, pool, move_q4<minfer_block_iq4_nl, IQ4_NLPanel>);
}

}  // namespace minfer::cpu
