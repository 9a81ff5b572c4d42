#include "int8_gemm.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "minfer/blocks.h"
#include "minfer/decode.hpp"
#include "block_bits.hpp"
#include "thread_pool.hpp"

namespace minfer::cpu {
namespace {

constexpr int kRows = 16;         // weight rows per panel: the int32 lanes of a 512-bit vector
constexpr int64_t kChunk = 32;    // groups of 32 values per k-chunk: 1024 values, a multiple of 256
constexpr int kVnniTokens = 8;    // tokens per VNNI tile: 8 int32 + 8 f32 accumulators, 8 weight vectors
constexpr int kAvx2Tokens = 4;    // tokens per AVX2 tile (16 vector registers)
constexpr int kAvx2WideTokens = 5;  // Q8_0's int16 tile: 10 int32 sums, two weights, an activation
constexpr int kAvxVnniTokens = 4;     // tokens per AVX-VNNI tile (4 weight vectors, 4 int32 and 4 f32 sums)

// One group of 32 values of a 16-row panel. q[g][r] holds values 4g..4g+3 of row r, unsigned;
// the value of row r is scale[h][r] * q + min[h][r] / d_a
// per activation unit, i.e. a token contributes scale * d_a * dot(q, a) + min * d_a * sum(a).
// H = 2 for types with a scale per 16 values (Q6_K): half h covers q[4h..4h+3].
template <int H>
struct alignas(64) Group {
  uint8_t q[8][kRows][4];
  float scale[H][kRows];
  float min[H][kRows];
};

// Q8_0 under AVX2: vpmaddubsw would saturate on its 8-bit values (2 * 255 * 127 > 2^15), and
// the sign workaround (|w| x sign(a, w)) costs three multiply-pipe ops per 8 rows x 4 values x
// token (on Zen 4 vpsignb shares vpmaddubsw's and vpmaddwd's two pipes). Packed as int16,
// with the activations widened once a call, vpmaddwd sums pairs of products straight into
// int32: two multiply-pipe ops for the same work (Zen 4, 8 rows x 6 tokens: 24.8 MACs a cycle
// against 19.8, measured on the loops alone). q[h][c][r] holds values 2c, 2c+1 of row 8h + r:
// each half of the panel contiguous, so that the half a tile reads stays in L1 (28 groups:
// 14 KiB) beside its tokens' activations.
struct alignas(64) WideGroup {
  int16_t q[2][16][8][2];
  float scale[kRows];
};

#define MINFER_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MINFER_VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define MINFER_AVXVNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

// ---- Packing: each type's values of one group of one row as 32 bytes, and its scale/min ----

MINFER_AVX2 inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// A unit per type: Block, H (scales per 32 values), Bits (of the unsigned values), values(row,
// g, vnni) and scales(row, g, vnni, s, mn); g counts groups of 32 values from the row's start.
// Q4_0, Q4_1, Q5_0, Q5_1: one block per group; Bits 4 or 5 (the fifth bits in qh). Types
// with a min m (value d*q + m) pass it through; the others' offset (8, 16) goes into the min.
template <class B, int kBits, int kOffset>
struct ULegacy {
  using Block = B;
  static constexpr int H = 1, Bits = kBits;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool) {
    if constexpr (kBits == 4) return nibbles32(r[g].qs);
    else return _mm256_or_si256(nibbles32(r[g].qs), high_bits_0x10(r[g].qh));
  }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool, float *s, float *mn) {
    s[0] = f16(r[g].d);
    if constexpr (kOffset == 0) mn[0] = f16(r[g].m);
    else mn[0] = -float(kOffset) * s[0];
  }
};
using UQ4_0 = ULegacy<minfer_block_q4_0, 4, 8>;
using UQ4_1 = ULegacy<minfer_block_q4_1, 4, 0>;
using UQ5_0 = ULegacy<minfer_block_q5_0, 5, 16>;
using UQ5_1 = ULegacy<minfer_block_q5_1, 5, 0>;
// Q8_0: under VNNI the values move to 0..255 (+128, taken off through the min). vpmaddubsw
// would saturate on those, so AVX2 packs them as int16 instead (WideGroup).
struct UQ8_0 {
  using Block = minfer_block_q8_0;
  static constexpr int H = 1, Bits = 8;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool vnni) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(r[g].qs));
    return vnni ? _mm256_xor_si256(v, _mm256_set1_epi8(char(0x80))) : v;
  }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool vnni, float *s, float *mn) {
    const float d = f16(r[g].d);
    s[0] = d, mn[0] = vnni ? -128.0f * d : 0.0f;
  }
};
// IQ4_NL and IQ4_XS: the 4-bit indices' signed table values (-127..113), as Q8_0 takes its
// bytes: under VNNI moved to 1..241 (+128, taken off through the min), under AVX2 signed (the
// int16 WideGroup in the GEMM, |w| x sign(a, w) in the row dots).
MINFER_AVX2 inline __m256i iq4_unit_values(const uint8_t *qs16, bool vnni) {
  const __m256i v = iq4_values32(qs16);
  return vnni ? _mm256_xor_si256(v, _mm256_set1_epi8(char(0x80))) : v;
}
struct UIQ4_NL {
  using Block = minfer_block_iq4_nl;
  static constexpr int H = 1, Bits = 8;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool vnni) { return iq4_unit_values(r[g].qs, vnni); }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool vnni, float *s, float *mn) {
    const float d = f16(r[g].d);
    s[0] = d, mn[0] = vnni ? -128.0f * d : 0.0f;
  }
};
struct UIQ4_XS {  // group g: sub-block g % 8 of super-block g / 8, its scale d * (6 bits - 32)
  using Block = minfer_block_iq4_xs;
  static constexpr int H = 1, Bits = 8;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool vnni) { return iq4_unit_values(r[g / 8].qs + 16 * (g % 8), vnni); }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool vnni, float *s, float *mn) {
    const Block &b = r[g / 8];
    s[0] = f16(b.d) * float(sdk::iq4_xs_scale(b, int(g % 8))), mn[0] = vnni ? -128.0f * s[0] : 0.0f;
  }
  // The row dots' (AVX2-form values: no min) 8 scales of a super-block.
  MINFER_AVX2 static void block_scales(const Block &b, float *s, float *mn) {
    const float d = f16(b.d);
    for (int j = 0; j < 8; ++j) s[j] = d * float(sdk::iq4_xs_scale(b, j)), mn[j] = 0.0f;
  }
};
// K-quants: group g is sub-block j = g % 8 of super-block g / 8 (32 values each). Q4_K and
// Q5_K share the nibbles (low ones for even j), the 6-bit scales and mins, d and dmin.
template <class KBlock>
MINFER_AVX2 inline __m256i k_nibbles(const KBlock &b, int j) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qs + 32 * (j / 2)));
  return _mm256_and_si256(j % 2 ? _mm256_srli_epi16(bytes, 4) : bytes, _mm256_set1_epi8(0x0f));
}
template <class KBlock>
MINFER_AVX2 inline void k_scales(const KBlock &b, int j, float *s, float *mn) {
  int sc, m;
  sdk::k4_scale_min(b.scales, j, sc, m);
  s[0] = f16(b.d) * float(sc), mn[0] = -f16(b.dmin) * float(m);
}
struct UQ4_K {
  using Block = minfer_block_q4_k;
  static constexpr int H = 1, Bits = 4;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool) { return k_nibbles(r[g / 8], int(g % 8)); }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool, float *s, float *mn) { k_scales(r[g / 8], int(g % 8), s, mn); }
};
struct UQ5_K {
  using Block = minfer_block_q5_k;
  static constexpr int H = 1, Bits = 5;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool) {
    const Block &b = r[g / 8];
    const int j = int(g % 8);
    // Value l's fifth bit is bit j of qh[l].
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qh));
    const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1));
    return _mm256_or_si256(k_nibbles(b, j), _mm256_slli_epi16(bit, 4));
  }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool, float *s, float *mn) { k_scales(r[g / 8], int(g % 8), s, mn); }
  // All 8 groups' at once (the row dots: once a super-block, not a group).
  MINFER_AVX2 static void block_scales(const Block &b, float *s, float *mn) {
    const float d = f16(b.d), dmin = f16(b.dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      sdk::k4_scale_min(b.scales, j, sc, m);
      s[j] = d * float(sc), mn[j] = -dmin * float(m);
    }
  }
};
// Q2_K and Q3_K: group g is values 32j.. (j = g % 8) of super-block g / 8: the 2-bit field at
// bit 2 (j % 4) of qs bytes 32 (j / 4)..+31 (Q3_K: plus a third bit, bit j of hmask[l]), with a
// scale (and for Q2_K a min) per 16 values, as decode_block reads them.
// out[i] = f * (byte i of v), i < 16; the bytes unsigned, or signed.
MINFER_AVX2 inline void store_bytes_times(__m128i v, float f, float *out, bool is_signed = false) {
  const __m256 m = _mm256_set1_ps(f);
  const __m128i v_hi = _mm_unpackhi_epi64(v, v);
  const __m256i a = is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
  const __m256i c = is_signed ? _mm256_cvtepi8_epi32(v_hi) : _mm256_cvtepu8_epi32(v_hi);
  _mm256_storeu_ps(out, _mm256_mul_ps(m, _mm256_cvtepi32_ps(a)));
  _mm256_storeu_ps(out + 8, _mm256_mul_ps(m, _mm256_cvtepi32_ps(c)));
}
template <class KBlock>
MINFER_AVX2 inline __m256i k_crumbs(const KBlock &b, int j) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qs + 32 * (j / 4)));
  return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (j % 4)), _mm256_set1_epi8(0x03));
}
struct UQ2_K {
  using Block = minfer_block_q2_k;
  static constexpr int H = 2, Bits = 2;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool) { return k_crumbs(r[g / 8], int(g % 8)); }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool, float *s, float *mn) {
    const Block &b = r[g / 8];
    const int j = int(g % 8);
    const float d = f16(b.d), dmin = f16(b.dmin);
    for (int h = 0; h < 2; ++h) s[h] = d * float(b.scales[2 * j + h] & 0x0f), mn[h] = -dmin * float(b.scales[2 * j + h] >> 4);
  }
  // The 16 sub-blocks' (group j's are 2j, 2j + 1), as floats.
  MINFER_AVX2 static void block_scales(const Block &b, float *s, float *mn) {
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b.scales));
    const __m128i lo = _mm_and_si128(sc, _mm_set1_epi8(0x0f)), hi = _mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0f));
    store_bytes_times(lo, f16(b.d), s);
    store_bytes_times(hi, -f16(b.dmin), mn);
  }
};
struct UQ3_K {  // values 0..7, offset 4
  using Block = minfer_block_q3_k;
  static constexpr int H = 2, Bits = 3;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool) {
    const Block &b = r[g / 8];
    const int j = int(g % 8);
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.hmask));
    const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(hm, j), _mm256_set1_epi8(1));
    return _mm256_or_si256(k_crumbs(b, j), _mm256_slli_epi16(bit, 2));
  }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool, float *s, float *mn) {
    const Block &b = r[g / 8];
    const int j = int(g % 8);
    const float d = f16(b.d);
    for (int h = 0; h < 2; ++h) s[h] = d * float(sdk::q3_k_scale(b.scales, 2 * j + h)), mn[h] = -4.0f * s[h];
  }
  // The 16 six-bit scales at once (block_bits.hpp).
  MINFER_AVX2 static void block_scales(const Block &b, float *s, float *mn) {
    store_bytes_times(q3_k_scales16(b.scales), f16(b.d), s, true);
    for (int i = 0; i < 16; ++i) mn[i] = -4.0f * s[i];
  }
};
// Q6_K: group g (values 32 (g % 8).. of super-block g / 8) has a scale per 16 values; the
// values are 0..63 with offset 32.
struct UQ6_K {
  using Block = minfer_block_q6_k;
  static constexpr int H = 2, Bits = 6;
  MINFER_AVX2 static __m256i values(const Block *r, int64_t g, bool) {
    const Block &b = r[g / 8];
    const int j = int(g % 8), half = j / 4, quarter = j % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.ql + 64 * half + 32 * (quarter & 1)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qh + 32 * half));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i low = quarter < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), _mm256_set1_epi8(0x03));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
  MINFER_AVX2 static void scales(const Block *r, int64_t g, bool, float *s, float *mn) {
    const Block &b = r[g / 8];
    const int j = int(g % 8);
    const float d = f16(b.d);
    for (int h = 0; h < 2; ++h) s[h] = d * float(b.scales[2 * j + h]), mn[h] = -32.0f * s[h];
  }
};

// 8 rows of 8 dwords to 8 vectors of one dword of each row: out[c] = (v[0][c], ..., v[7][c]).
MINFER_AVX2 inline void transpose8x8(__m256i *v) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x20);
    v[c + 4] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x31);
  }
}

// Groups [g0, g0 + ng) of rows [0, rows) (row_bytes apart) into out[0..ng); rows past `rows`
// are zero (their results are never stored).
template <class U>
MINFER_AVX2 void pack_panel(const uint8_t *w, int64_t row_bytes, int rows, int64_t g0, int64_t ng, bool vnni, Group<U::H> *out) {
  using Block = typename U::Block;
  for (int r0 = 0; r0 < kRows; r0 += 8) {
    const Block *row[8];
    for (int i = 0; i < 8; ++i) row[i] = r0 + i < rows ? reinterpret_cast<const Block *>(w + (r0 + i) * row_bytes) : nullptr;
    for (int64_t j = 0; j < ng; ++j) {
      Group<U::H> &G = out[j];
      __m256i v[8];
      for (int i = 0; i < 8; ++i) {
        float s[U::H], mn[U::H];
        if (row[i]) {
          v[i] = U::values(row[i], g0 + j, vnni);
          U::scales(row[i], g0 + j, vnni, s, mn);
        } else {
          v[i] = _mm256_setzero_si256();
          for (int h = 0; h < U::H; ++h) s[h] = mn[h] = 0;
        }
        for (int h = 0; h < U::H; ++h) G.scale[h][r0 + i] = s[h], G.min[h][r0 + i] = mn[h];
      }
      transpose8x8(v);
      for (int c = 0; c < 8; ++c) _mm256_store_si256(reinterpret_cast<__m256i *>(G.q[c][r0]), v[c]);
    }
  }
}

// Groups [g0, g0 + ng) of rows [0, rows) of an 8-bit unit (Q8_0, IQ4: signed values, no min
// outside VNNI) as int16 (WideGroup); rows past `rows` are zero.
template <class U>
MINFER_AVX2 void pack_wide(const uint8_t *w, int64_t row_bytes, int rows, int64_t g0, int64_t ng, WideGroup *out) {
  using Block = typename U::Block;
  for (int r0 = 0; r0 < kRows; r0 += 8) {
    const Block *row[8];
    for (int i = 0; i < 8; ++i) row[i] = r0 + i < rows ? reinterpret_cast<const Block *>(w + (r0 + i) * row_bytes) : nullptr;
    for (int64_t j = 0; j < ng; ++j) {
      WideGroup &G = out[j];
      __m256i lo[8], hi[8];  // values 0..15 and 16..31 of each row: 8 dwords of two int16
      for (int i = 0; i < 8; ++i) {
        const __m256i v = row[i] ? U::values(row[i], g0 + j, false) : _mm256_setzero_si256();
        lo[i] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
        hi[i] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
        float sc = 0.0f, mn = 0.0f;
        if (row[i]) U::scales(row[i], g0 + j, false, &sc, &mn);
        G.scale[r0 + i] = sc;
      }
      transpose8x8(lo);
      transpose8x8(hi);
      for (int c = 0; c < 8; ++c) {
        _mm256_store_si256(reinterpret_cast<__m256i *>(G.q[r0 / 8][c]), lo[c]);
        _mm256_store_si256(reinterpret_cast<__m256i *>(G.q[r0 / 8][8 + c]), hi[c]);
      }
    }
  }
}

// Σ a over the half h of an activation block that a scale covers (H = 2: 16 values each).
template <int H>
inline float d_sum_of(const ActBlock &x, int h) {
  if constexpr (H == 1) return x.d_sum;
  return h == 0 ? x.d_sum_lo : x.d_sum - x.d_sum_lo;
}

// ---- AVX-512 VNNI: 16 rows x T tokens ---------------------------------------------------

template <int H, int T>
MINFER_VNNI512 void tile_vnni(const Group<H> *G, int64_t ng, const ActBlock *a, int64_t kb, float *y, int64_t m, int rows, bool add) {
  const __mmask16 mask = rows >= kRows ? __mmask16(0xffff) : __mmask16((1u << rows) - 1);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = add ? _mm512_maskz_loadu_ps(mask, y + t * m) : _mm512_setzero_ps();
  for (int64_t j = 0; j < ng; ++j) {
    const Group<H> &g = G[j];
    __m512i w[8];
    for (int c = 0; c < 8; ++c) w[c] = _mm512_load_si512(g.q[c]);
    for (int h = 0; h < H; ++h) {
      const __m512 s = _mm512_load_ps(g.scale[h]), mn = _mm512_load_ps(g.min[h]);
      for (int t = 0; t < T; ++t) {
        const ActBlock &x = a[t * kb + j];
        __m512i ia = _mm512_setzero_si512();
        // The 4 activations broadcast straight from memory (a load, not a move from a GPR).
        for (int c = h * 8 / H; c < (h + 1) * 8 / H; ++c)
          ia = _mm512_dpbusd_epi32(ia, w[c], _mm512_broadcastd_epi32(_mm_loadu_si32(x.qs + 4 * c)));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), _mm512_mul_ps(s, _mm512_set1_ps(x.d)), acc[t]);
        acc[t] = _mm512_fmadd_ps(mn, _mm512_set1_ps(d_sum_of<H>(x, h)), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * m, mask, acc[t]);
}

// ---- AVX2: 8 rows (half `half` of the panel) x T tokens ------------------------------------
// vpmaddubsw adds pairs of u8 x s8 products into int16 with saturation: P groups of 4 values
// are summed in int16 before widening while that cannot overflow (2 * 15 * 127 * 8 < 2^15
// for 4-bit values, * 4 for 5-bit, * 2 for 6-bit; 2- and 3-bit values run 4 groups deep, a
// scale's 16 values).
// One c of a group for T tokens (tile_avx2): its products added to the int16 sums p16.
template <int H, int T>
MINFER_AVX2 __attribute__((always_inline)) inline void tile_piece(const Group<H> &g, int c, int half, const ActBlock *a, int64_t kb, int64_t j,
                                                                  bool first, __m256i (&p16)[T]) {
  const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i *>(g.q[c][8 * half]));
  for (int t = 0; t < T; ++t) {
    const __m256i prod = _mm256_maddubs_epi16(wv, _mm256_broadcastd_epi32(_mm_loadu_si32(a[t * kb + j].qs + 4 * c)));
    p16[t] = first ? prod : _mm256_add_epi16(p16[t], prod);
  }
}

template <int H, int T, int P>
MINFER_AVX2 void tile_avx2(const Group<H> *G, int64_t ng, const ActBlock *a, int64_t kb, float *y, int64_t m, int rows, int half, bool add) {
  const int n = std::clamp(rows - 8 * half, 0, 8);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  y += 8 * half;
  for (int t = 0; t < T; ++t) acc[t] = add ? _mm256_maskload_ps(y + t * m, mask) : _mm256_setzero_ps();
  for (int64_t j = 0; j < ng; ++j) {
    const Group<H> &g = G[j];
    for (int h = 0; h < H; ++h) {
      __m256i ia[T];
      for (int t = 0; t < T; ++t) ia[t] = _mm256_setzero_si256();
      __m256i p16[T];
      const int c_begin = h * 8 / H, c_end = (h + 1) * 8 / H;
      if constexpr (P == 4) {  // 5-bit values (and 2-/3-bit over half groups): unrolled is quicker (Q5_0 896 x 4864 at 128 tokens 4.08-4.40 ms against 4.33-4.54)
        for (int c0 = c_begin; c0 < c_end; c0 += P) {
          for (int c = c0; c < c0 + P; ++c) tile_piece<H, T>(g, c, half, a, kb, j, c == c0, p16);
          for (int t = 0; t < T; ++t) ia[t] = _mm256_add_epi32(ia[t], _mm256_madd_epi16(p16[t], ones));
        }
      } else {
        // Rolled: unrolled, the compiler hoisted every c's weight vector and spilled the sums
        // to the stack (46-70 stack operands a tile; at 128 tokens, 896 x 4864, 2 threads,
        // Xeon: Q4_1 4.29-4.65 ms rolled into 3.84-3.86).
#pragma GCC unroll 1
        for (int c0 = c_begin; c0 < c_end; c0 += P) {
#pragma GCC unroll 1
          for (int c = c0; c < c0 + P; ++c) tile_piece<H, T>(g, c, half, a, kb, j, c == c0, p16);
          for (int t = 0; t < T; ++t) ia[t] = _mm256_add_epi32(ia[t], _mm256_madd_epi16(p16[t], ones));
        }
      }
      const __m256 s = _mm256_load_ps(g.scale[h] + 8 * half), mn = _mm256_load_ps(g.min[h] + 8 * half);
      for (int t = 0; t < T; ++t) {
        const ActBlock &x = a[t * kb + j];
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t]), _mm256_mul_ps(s, _mm256_set1_ps(x.d)), acc[t]);
        acc[t] = _mm256_fmadd_ps(mn, _mm256_set1_ps(d_sum_of<H>(x, h)), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm256_maskstore_ps(y + t * m, mask, acc[t]);
}

// s += v in s's own register: written as an intrinsic, GCC 12 adds into a new register and
// copies it back (a vmovdqa per token and pass in tile_avx2_wide).
MINFER_AVX2 inline void add_in_place(__m256i &s, __m256i v) { asm("vpaddd %1, %0, %0" : "+x"(s) : "x"(v)); }

// The activations of Q8_0's int16 tiles (tile_avx2_wide), interleaved so that a tile reads one
// stream: tokens in blocks of kAvx2WideTokens (the last may be shorter, nt tokens); block b
// starts at pair 16 * kb * b * kAvx2WideTokens and holds, for each group j and pair c of values
// 2c, 2c+1, its nt tokens' pairs: pair[(16 * j + c) * nt + t]. d[j * nt + t] (from
// kb * b * kAvx2WideTokens) are the scales.
struct WideActs {
  const int32_t *pair;
  const float *d;
};

// Q8_0 (WideGroup): 16 rows x T tokens of a WideActs block. Both halves' weights meet each
// broadcast (half the broadcasts a MAC of an 8-row tile); the 2T int32 sums fill the registers,
// so the float sums live in memory, touched once a group.
template <int T>
MINFER_AVX2 void tile_avx2_wide(const WideGroup *G, int64_t ng, const int32_t *pair, const float *d, float *y, int64_t m, int rows, bool add) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask[2] = {_mm256_cmpgt_epi32(_mm256_set1_epi32(rows), lanes), _mm256_cmpgt_epi32(_mm256_set1_epi32(rows - 8), lanes)};
  alignas(32) float acc[T][kRows];
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < 2; ++h)
      _mm256_store_ps(acc[t] + 8 * h, add ? _mm256_maskload_ps(y + t * m + 8 * h, mask[h]) : _mm256_setzero_ps());
  for (int64_t j = 0; j < ng; ++j, pair += 16 * T, d += T) {
    const WideGroup &g = G[j];
    __m256i ia[T][2];
    for (int t = 0; t < T; ++t) ia[t][0] = ia[t][1] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int c = 0; c < 16; ++c) {
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i *>(g.q[0][c]));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i *>(g.q[1][c]));
      for (int t = 0; t < T; ++t) {
        const __m256i x = _mm256_set1_epi32(pair[c * T + t]);
        add_in_place(ia[t][0], _mm256_madd_epi16(w0, x));
        add_in_place(ia[t][1], _mm256_madd_epi16(w1, x));
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m256 dt = _mm256_set1_ps(d[t]);
      for (int h = 0; h < 2; ++h)
        _mm256_store_ps(acc[t] + 8 * h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t][h]), _mm256_mul_ps(_mm256_load_ps(g.scale + 8 * h), dt),
                                                        _mm256_load_ps(acc[t] + 8 * h)));
    }
  }
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < 2; ++h) _mm256_maskstore_ps(y + t * m + 8 * h, mask[h], _mm256_load_ps(acc[t] + 8 * h));
}

// Tokens [t0, t0 + nt) (one WideActs block) of a, kb blocks each, into the block's layout.
MINFER_AVX2 void widen_block(const ActBlock *a, int64_t kb, int nt, int32_t *pair, float *d) {
  for (int64_t j = 0; j < kb; ++j)
    for (int t = 0; t < nt; ++t) {
      const ActBlock &x = a[t * kb + j];
      d[j * nt + t] = x.d;
      for (int h = 0; h < 2; ++h) {
        alignas(32) int32_t p[8];
        _mm256_store_si256(reinterpret_cast<__m256i *>(p), _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x.qs + 16 * h))));
        for (int c = 0; c < 8; ++c) pair[(16 * j + 8 * h + c) * nt + t] = p[c];
      }
    }
}

// a's tokens as WideActs, in the calling thread's buffers.
WideActs widen_activations(const ActBlock *a, int64_t tokens, int64_t kb, ThreadPool &pool) {
  thread_local std::vector<int32_t> pairs;
  thread_local std::vector<float> scales;
  pairs.resize(size_t(tokens * kb * 16));
  scales.resize(size_t(tokens * kb));
  const WideActs w{pairs.data(), scales.data()};
  const int64_t blocks = (tokens + kAvx2WideTokens - 1) / kAvx2WideTokens;
  pool.run(blocks, [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t t0 = b * kAvx2WideTokens;
      // w's pointers, not the buffers: a worker's thread_local names would be its own.
      widen_block(a + t0 * kb, kb, int(std::min<int64_t>(kAvx2WideTokens, tokens - t0)), const_cast<int32_t *>(w.pair) + t0 * kb * 16,
                  const_cast<float *>(w.d) + t0 * kb);
    }
  });
  return w;
}

// ---- AVX-VNNI: 8 rows (half `half` of the panel) x T tokens, the VNNI panel layout -----------
// As tile_vnni on 256 bits: vpdpbusd sums u8 x s8 into int32 without saturating, so every
// type takes the unsigned values (Q8_0 moved by +128 as for AVX-512) and no int16 stage. The
// group's weights are held four vectors at a time (16 registers: 4 of them, T sums, T floats).
template <int H, int T>
MINFER_AVXVNNI void tile_avxvnni(const Group<H> *G, int64_t ng, const ActBlock *a, int64_t kb, float *y, int64_t m, int rows, int half,
                                 bool add) {
  const int n = std::clamp(rows - 8 * half, 0, 8);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 acc[T];
  y += 8 * half;
  for (int t = 0; t < T; ++t) acc[t] = add ? _mm256_maskload_ps(y + t * m, mask) : _mm256_setzero_ps();
  for (int64_t j = 0; j < ng; ++j) {
    const Group<H> &g = G[j];
    __m256i ia[T];
    for (int t = 0; t < T; ++t) ia[t] = _mm256_setzero_si256();
    for (int c0 = 0; c0 < 8; c0 += 4) {
      const int h = c0 * H / 8;  // H = 2: c 0..3 are the first scale's half, 4..7 the second's
      __m256i w[4];
      for (int c = 0; c < 4; ++c) w[c] = _mm256_load_si256(reinterpret_cast<const __m256i *>(g.q[c0 + c][8 * half]));
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < 4; ++c)
          ia[t] = _mm256_dpbusd_avx_epi32(ia[t], w[c], _mm256_broadcastd_epi32(_mm_loadu_si32(a[t * kb + j].qs + 4 * (c0 + c))));
      if (H == 1 && c0 == 0) continue;  // one scale: both halves into the same sums
      const __m256 s = _mm256_load_ps(g.scale[h] + 8 * half), mn = _mm256_load_ps(g.min[h] + 8 * half);
      for (int t = 0; t < T; ++t) {
        const ActBlock &x = a[t * kb + j];
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[t]), _mm256_mul_ps(s, _mm256_set1_ps(x.d)), acc[t]);
        acc[t] = _mm256_fmadd_ps(mn, _mm256_set1_ps(d_sum_of<H>(x, h)), acc[t]);
        ia[t] = _mm256_setzero_si256();
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm256_maskstore_ps(y + t * m, mask, acc[t]);
}

// The bytes of groups [g0, g0 + ng) (of kb) of `rows` rows into L2: the next panel's chunk,
// asked for while this panel's tiles run, so that its packing does not wait on memory (a prompt
// step reads each weight once, from DRAM).
inline void prefetch_chunk(const uint8_t *w, int64_t row_bytes, int rows, int64_t g0, int64_t ng, int64_t kb) {
  const int64_t b0 = g0 * row_bytes / kb, b1 = (g0 + ng) * row_bytes / kb;  // a group's bytes are row_bytes / kb
  for (int r = 0; r < rows; ++r)
    for (int64_t b = b0 & ~int64_t(63); b < b1; b += 64) _mm_prefetch(reinterpret_cast<const char *>(w + r * row_bytes + b), _MM_HINT_T1);
}

template <class U>
void gemm_typed(Isa isa, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t m, const ActBlock *a, int64_t tokens, float *y,
                ThreadPool &pool) {
  constexpr int H = U::H;
  // Groups of 4 values summed in int16 under AVX2 (see tile_avx2).
  constexpr int P = U::Bits <= 4 ? 8 / H : U::Bits == 5 ? 4 / H : 2;
  const bool vnni = isa == Isa::Avx512Vnni, avx_vnni = isa == Isa::AvxVnni;
  const bool wide = U::Bits == 8 && !vnni && !avx_vnni;  // 8-bit values (Q8_0, IQ4) under plain AVX2: WideGroup
  const int64_t kb = k / 32, panels = (m + kRows - 1) / kRows;
  const WideActs wa = wide ? widen_activations(a, tokens, kb, pool) : WideActs{};
  // Threads take whole panels; within a thread, k-chunk by k-chunk so the tokens' activations
  // of a chunk (tokens x 32 blocks) stay in L2 while each panel's chunk is packed once.
  pool.run(panels, [&](int64_t p0, int64_t p1, int) {
    thread_local std::vector<Group<H>> buf;
    thread_local std::vector<WideGroup> wide_buf;
    (wide ? wide_buf.resize(size_t(std::min(kChunk, kb))) : buf.resize(size_t(std::min(kChunk, kb))));
    for (int64_t c0 = 0; c0 < kb; c0 += kChunk) {
      const int64_t ng = std::min(kChunk, kb - c0);
      for (int64_t p = p0; p < p1; ++p) {
        const int rows = int(std::min<int64_t>(kRows, m - p * kRows));
        const uint8_t *wp = w + p * kRows * row_bytes;
        float *yp = y + p * kRows;
        if (p + 1 < p1) prefetch_chunk(wp + kRows * row_bytes, row_bytes, int(std::min<int64_t>(kRows, m - (p + 1) * kRows)), c0, ng, kb);
        if (wide) {
          pack_wide<U>(wp, row_bytes, rows, c0, ng, wide_buf.data());
          for (int64_t t0 = 0; t0 < tokens; t0 += kAvx2WideTokens) {
            const int nt = int(std::min<int64_t>(kAvx2WideTokens, tokens - t0));
            by_count<kAvx2WideTokens>(nt, [&](auto tag) {
              tile_avx2_wide<decltype(tag)::value>(wide_buf.data(), ng, wa.pair + (t0 * kb + c0 * nt) * 16, wa.d + t0 * kb + c0 * nt, yp + t0 * m, m,
                                                   rows, c0 > 0);
            });
          }
          continue;
        }
        pack_panel<U>(wp, row_bytes, rows, c0, ng, vnni || avx_vnni, buf.data());
        if (vnni) {
          for (int64_t t0 = 0; t0 < tokens; t0 += kVnniTokens)
            by_count<kVnniTokens>(int(std::min<int64_t>(kVnniTokens, tokens - t0)), [&](auto tag) {
              tile_vnni<H, decltype(tag)::value>(buf.data(), ng, a + t0 * kb + c0, kb, yp + t0 * m, m, rows, c0 > 0);
            });
        } else if (avx_vnni) {
          for (int half = 0; half < 2 && 8 * half < rows; ++half)
            for (int64_t t0 = 0; t0 < tokens; t0 += kAvxVnniTokens)
              by_count<kAvxVnniTokens>(int(std::min<int64_t>(kAvxVnniTokens, tokens - t0)), [&](auto tag) {
                tile_avxvnni<H, decltype(tag)::value>(buf.data(), ng, a + t0 * kb + c0, kb, yp + t0 * m, m, rows, half, c0 > 0);
              });
        } else if constexpr (U::Bits < 8) {
          for (int half = 0; half < 2 && 8 * half < rows; ++half)
            for (int64_t t0 = 0; t0 < tokens; t0 += kAvx2Tokens)
              by_count<kAvx2Tokens>(int(std::min<int64_t>(kAvx2Tokens, tokens - t0)), [&](auto tag) {
                tile_avx2<H, decltype(tag)::value, P>(buf.data(), ng, a + t0 * kb + c0, kb, yp + t0 * m, m, rows, half, c0 > 0);
              });
        }
      }
    }
  });
}

// ---- Row dots for one to four tokens, on the same units ------------------------------------
// The types with no row kernel in qdot.cpp (Q4_1, Q5_1, Q2_K, Q3_K; Q5_K and AVX2's Q3_K until they got one) took the GEMM at every
// count, and at one token its packing cost more than the dots: 11-12 GB/s on a DRAM-bound
// 2048 x 65536 matrix where Q4_K's panels read 43 (Zen 4 EPYC, 2 threads). Here each group's
// 32 values are decoded by the unit into a vector and dotted with each token's activations in
// place: 8 lanes of 4 products, a group's scale on all of them (H = 2: lanes 0-3 and 4-7 take
// the two), the mins through the activations' sums.
template <class U>
concept has_block_scales = requires(const typename U::Block &b, float *f) { U::block_scales(b, f, f); };

MINFER_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// The row dots' running sum of the mins: a float, or with two scales a group a vector (mv).
template <class U>
struct MinAccOf {
  using type = float;
};
template <class U>
  requires(U::H == 2)
struct MinAccOf<U> {
  using type = __m256;  // (a specialization: __m256 as a template argument would lose its attributes)
};
template <class U>
using MinAcc = typename MinAccOf<U>::type;

// Weight rows stream from memory once per token: the lines 2 KiB ahead into L1 and 16 KiB
// ahead into L2, as qdot.cpp's row kernels ask (several misses in flight), one call per 128 bytes.
inline void unit_prefetch(const void *at) {
  const char *p = static_cast<const char *>(at);
  _mm_prefetch(p + 2048, _MM_HINT_T0);
  _mm_prefetch(p + 2048 + 64, _MM_HINT_T0);
  _mm_prefetch(p + 16384, _MM_HINT_T1);
  _mm_prefetch(p + 16384 + 64, _MM_HINT_T1);
}

// One group g's dots for every token; K-quant units go a super-block at a time with its 8
// groups unrolled, so each group's place in the block (its shifts, its scales) is a constant,
// the scales and mins come back from the block's decoding as whole vectors, and the rows are
// prefetched. AVX2, 2048 x 65536 at one token, Zen 4 EPYC, 2 threads, side by side: Q2_K
// 9.7 -> 11.6 GB/s, Q3_K 10.1 -> 12.6; Qwen3-0.6B tg32 Q2_K 42.5 -> 48.8, Q3_K 36.9 -> 42.2.
#define MINFER_UNIT_DOTS(NAME, TARGET, DOT)                                                                            \
  template <class U, int T>                                                                                            \
  /* sv: the group's scales over the lanes (H = 2: lanes 0-3 and 4-7). mv: its min; with H = 2 a vector */         \
  /* like sv over 4 (each lane's share), so no scalar is read back from the scales just stored */               \
  TARGET inline void NAME##_group(const typename U::Block *w, const ActBlock *x, int64_t stride, int64_t g, __m256 sv,     \
                                  MinAcc<U> mv, __m256 *acc, MinAcc<U> *mins) {                                         \
    const __m256i v = U::values(w, g, false);                                                                          \
    for (int t = 0; t < T; ++t) {                                                                                      \
      const ActBlock &a = x[t * stride + g];                                                                           \
      const __m256i d = DOT<U>(v, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs)));                       \
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(sv, _mm256_set1_ps(a.d)), acc[t]);                 \
      if constexpr (U::H == 1)                                                                                         \
        mins[t] += mv * a.d_sum;                                                                                       \
      else                                                                                                             \
        mins[t] = _mm256_fmadd_ps(mv, _mm256_set_m128(_mm_set1_ps(a.d_sum - a.d_sum_lo), _mm_set1_ps(a.d_sum_lo)), mins[t]); \
    }                                                                                                                  \
  }                                                                                                                    \
  template <class U, int T>                                                                                            \
  TARGET void NAME(const typename U::Block *w, const ActBlock *x, int64_t stride, int64_t ng, float *out) {            \
    __m256 acc[T];                                                                                                     \
    MinAcc<U> mins[T];                                                                                                 \
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps(), mins[t] = MinAcc<U>{};                                   \
    const __m256 quarter = _mm256_set1_ps(0.25f); /* H = 2: each min lands in 4 lanes */                               \
    if constexpr (has_block_scales<U>) { /* a super-block's scales and mins decoded at once */                         \
      alignas(32) float bs[8 * U::H], bmn[8 * U::H];                                                                   \
      for (int64_t b = 0; b < ng / 8; ++b) {                                                                           \
        unit_prefetch(w + b);                                                                                          \
        if constexpr (sizeof(typename U::Block) > 128) unit_prefetch(reinterpret_cast<const char *>(w + b) + 128);     \
        U::block_scales(w[b], bs, bmn);                                                                                \
        /* the scales back as whole vectors (a narrower load of a just-stored vector can wait for */                  \
        /* the store), each group's pair spread over lanes 0-3 and 4-7 by a permute */                                \
        const __m256 s0 = _mm256_load_ps(bs), s1 = _mm256_load_ps(bs + 8 * U::H - 8);                                  \
        const __m256 m0 = _mm256_mul_ps(_mm256_load_ps(bmn), quarter), m1 = _mm256_mul_ps(_mm256_load_ps(bmn + 8 * U::H - 8), quarter); \
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; ++j) {                                                          \
          const int i = U::H == 2 ? 2 * (j % 4) : j;                                                                   \
          const __m256i lanes = U::H == 2 ? _mm256_setr_epi32(i, i, i, i, i + 1, i + 1, i + 1, i + 1) : _mm256_set1_epi32(i); \
          const bool second = U::H == 2 && j >= 4;                                                                     \
          MinAcc<U> mv;                                                                                                \
          if constexpr (U::H == 1) mv = bmn[j];                                                                        \
          else mv = _mm256_permutevar8x32_ps(second ? m1 : m0, lanes);                                                 \
          NAME##_group<U, T>(w, x, stride, 8 * b + j, _mm256_permutevar8x32_ps(second ? s1 : s0, lanes), mv, acc, mins); \
        }                                                                                                              \
      }                                                                                                                \
    } else {                                                                                                           \
      for (int64_t g = 0; g < ng; ++g) { /* small blocks: the hardware prefetchers keep up */                         \
        float s[U::H], mn[U::H];                                                                                       \
        U::scales(w, g, false, s, mn);                                                                                 \
        const __m256 sv = U::H == 1 ? _mm256_set1_ps(s[0]) : _mm256_set_m128(_mm_set1_ps(s[U::H - 1]), _mm_set1_ps(s[0])); \
        MinAcc<U> mv;                                                                                                  \
        if constexpr (U::H == 1) mv = mn[0];                                                                           \
        else mv = _mm256_mul_ps(quarter, _mm256_set_m128(_mm_set1_ps(mn[1]), _mm_set1_ps(mn[0])));                     \
        NAME##_group<U, T>(w, x, stride, g, sv, mv, acc, mins);                                                        \
      }                                                                                                                \
    }                                                                                                                  \
    for (int t = 0; t < T; ++t) {                                                                                      \
      if constexpr (U::H == 1) out[t] = hsum8(acc[t]) + mins[t];                                                       \
      else out[t] = hsum8(_mm256_add_ps(acc[t], mins[t]));                                                             \
    }                                                                                                                  \
  }

// The units' AVX2-form values: unsigned up to 63, or signed 8-bit (Bits 8: IQ4), which take
// |w| x sign(a, w) (|w|, |a| <= 127: a pair's sum stays below 2^15).
template <class U>
MINFER_AVX2 inline __m256i unit_dot_avx2(__m256i u, __m256i s) {
  if constexpr (U::Bits == 8) return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(u), _mm256_sign_epi8(s, u)), _mm256_set1_epi16(1));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));  // u <= 63: no saturation
}
template <class U>
MINFER_VNNI512 inline __m256i unit_dot_vnni(__m256i u, __m256i s) {
  if constexpr (U::Bits == 8) return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(u), _mm256_sign_epi8(s, u));
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}
MINFER_UNIT_DOTS(unit_dots_avx2, MINFER_AVX2, unit_dot_avx2)
MINFER_UNIT_DOTS(unit_dots_vnni, MINFER_VNNI512, unit_dot_vnni)
#undef MINFER_UNIT_DOTS

template <class U, bool Vnni>
void unit_dots(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const typename U::Block *>(w_row);
  by_count<kMaxTokens>(n_tok, [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    Vnni ? unit_dots_vnni<U, T>(w, x, stride, n / 32, out) : unit_dots_avx2<U, T>(w, x, stride, n / 32, out);
  });
}

}  // namespace

QDotFn unit_row_dots(int32_t dtype, Isa isa) {
  if (isa != Isa::Avx512Vnni && isa != Isa::Amx && !avx2_family(isa)) return nullptr;
  const bool vnni = isa == Isa::Avx512Vnni || isa == Isa::Amx;
  switch (dtype) {
    case MINFER_DTYPE_Q4_1: return vnni ? unit_dots<UQ4_1, true> : unit_dots<UQ4_1, false>;
    case MINFER_DTYPE_Q5_1: return vnni ? unit_dots<UQ5_1, true> : unit_dots<UQ5_1, false>;
    case MINFER_DTYPE_Q2_K: return vnni ? unit_dots<UQ2_K, true> : unit_dots<UQ2_K, false>;
    case MINFER_DTYPE_Q3_K: return vnni ? unit_dots<UQ3_K, true> : unit_dots<UQ3_K, false>;
    case MINFER_DTYPE_IQ4_NL: return vnni ? unit_dots<UIQ4_NL, true> : unit_dots<UIQ4_NL, false>;
    case MINFER_DTYPE_IQ4_XS: return vnni ? unit_dots<UIQ4_XS, true> : unit_dots<UIQ4_XS, false>;
    default: return nullptr;
  }
}

bool gemm_takes(int32_t dtype, Isa isa) {
  if (isa != Isa::Avx512Vnni && !avx2_family(isa)) return false;
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: case MINFER_DTYPE_Q4_1: case MINFER_DTYPE_Q5_0: case MINFER_DTYPE_Q5_1: case MINFER_DTYPE_Q8_0:
    case MINFER_DTYPE_Q2_K: case MINFER_DTYPE_Q3_K: case MINFER_DTYPE_Q4_K: case MINFER_DTYPE_Q5_K: case MINFER_DTYPE_Q6_K:
    case MINFER_DTYPE_IQ4_NL: case MINFER_DTYPE_IQ4_XS:
      return true;
    default: return false;
  }
}

void int8_gemm(int32_t dtype, Isa isa, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t m, const ActBlock *a, int64_t tokens,
               float *y, ThreadPool &pool) {
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: return gemm_typed<UQ4_0>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q4_1: return gemm_typed<UQ4_1>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q5_0: return gemm_typed<UQ5_0>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q5_1: return gemm_typed<UQ5_1>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q8_0: return gemm_typed<UQ8_0>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q2_K: return gemm_typed<UQ2_K>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q3_K: return gemm_typed<UQ3_K>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q4_K: return gemm_typed<UQ4_K>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q5_K: return gemm_typed<UQ5_K>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_Q6_K: return gemm_typed<UQ6_K>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_IQ4_NL: return gemm_typed<UIQ4_NL>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    case MINFER_DTYPE_IQ4_XS: return gemm_typed<UIQ4_XS>(isa, w, row_bytes, k, m, a, tokens, y, pool);
    default: break;
  }
}

}  // namespace minfer::cpu
