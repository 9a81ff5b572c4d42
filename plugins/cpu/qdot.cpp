#include "qdot.hpp"

#include "amx_matmul.hpp"
#include "block_bits.hpp"
#include "int8_gemm.hpp"

#include <cpuid.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <cstddef>
#include <type_traits>

#include "minfer/blocks.h"
#include "minfer/decode.hpp"

namespace minfer::cpu {
namespace {

// Calls f(std::integral_constant<int, T>{}) with T = n_tok, 1..kMaxTokens: the kernels take
// the token count as a template argument so their per-token accumulators stay in registers.
template <class F>
void by_tokens(int n_tok, F &&f) {
  static_assert(kMaxTokens == 4, "by_tokens lists the counts 1..4");
  switch (n_tok) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

// ---- plain C: the definition the SIMD versions must equal -------------------------------

template <class Block>
int q_at(const Block &w, int j);
template <>
int q_at<minfer_block_q4_0>(const minfer_block_q4_0 &w, int j) {
  return (j < 16 ? (w.qs[j] & 15) : (w.qs[j - 16] >> 4)) - 8;
}
template <>
int q_at<minfer_block_q8_0>(const minfer_block_q8_0 &w, int j) {
  return w.qs[j];
}

template <class Block>
void qdot_scalar(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const Block *>(w_row);
  for (int t = 0; t < n_tok; ++t) {
    float sum = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
      int32_t acc = 0;
      for (int j = 0; j < 32; ++j) acc += q_at(w[b], j) * x[t * stride + b].qs[j];
      sum += sdk::half_to_float(w[b].d) * x[t * stride + b].d * float(acc);
    }
    out[t] = sum;
  }
}

// ---- AVX2 ------------------------------------------------------------------------------

// Sum of products of 32 signed bytes, as 8 int32 lanes: maddubs needs an unsigned operand, so
// multiply |a| by b carrying a's sign.
__attribute__((target("avx2,fma"))) inline __m256 dot_i8_ps(__m256i a, __m256i b) {
  const __m256i prod16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(prod16, _mm256_set1_epi16(1)));
}

__attribute__((target("avx2,fma,f16c"))) inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Weights stream from memory once per token: ask for the lines 2 KiB ahead into L1 so several
// misses are in flight (the loop's own loads alone reach under half the core's bandwidth; 2 KiB
// measured best of 0.5-4 KiB), and 16 KiB ahead into L2 so more are (a row dot alone streams
// Q8_0 at ~20 GB/s instead of ~17, Q4_0 ~15.7 instead of ~14.2, 2 threads, 4 runs each).
template <class Block>
inline void prefetch_ahead(const Block *w) {
  constexpr int kAhead = int(2048 / sizeof(Block));
  const char *p = reinterpret_cast<const char *>(w);
  _mm_prefetch(reinterpret_cast<const char *>(w + kAhead), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char *>(w + kAhead) + 64, _MM_HINT_T0);
  _mm_prefetch(p + 16384, _MM_HINT_T1);
  _mm_prefetch(p + 16384 + 64, _MM_HINT_T1);
  if constexpr (sizeof(Block) > 128) {  // Q5_K's 176 bytes, Q6_K's 210: a third line per block
    _mm_prefetch(reinterpret_cast<const char *>(w + kAhead) + 128, _MM_HINT_T0);
    _mm_prefetch(p + 16384 + 128, _MM_HINT_T1);
  }
}

// The weight block's 32 values as signed bytes.
__attribute__((target("avx2"))) inline __m256i load_q(const minfer_block_q4_0 &w) {
  // 16 bytes of nibbles -> 32 values: low nibbles are values 0..15, high nibbles 16..31.
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}
__attribute__((target("avx2"))) inline __m256i load_q(const minfer_block_q8_0 &w) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w.qs));
}

// One block's contribution for one token, as 8 float lanes (AVX2: sign trick + maddubs).
template <class Block>
__attribute__((target("avx2,fma"))) inline __m256 block_dot_avx2(const __m256i q, const ActBlock &a) {
  return dot_i8_ps(q, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs)));
}

template <class Block, int T>
__attribute__((target("avx2,fma,f16c"))) void qdot_avx2_t(const Block *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {
  // Two accumulators per token, for even and odd blocks: consecutive FMAs do not wait on
  // each other. Named, not indexed by the block number, so they stay in registers.
  __m256 even[T], odd[T];
  for (int t = 0; t < T; ++t) even[t] = odd[t] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch_ahead(w + b);
    const __m256i q0 = load_q(w[b]), q1 = load_q(w[b + 1]);
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
    for (int t = 0; t < T; ++t) {
      const ActBlock *a = x + t * stride + b;
      even[t] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * a[0].d), block_dot_avx2<Block>(q0, a[0]), even[t]);
      odd[t] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * a[1].d), block_dot_avx2<Block>(q1, a[1]), odd[t]);
    }
  }
  if (b < nb) {
    const __m256i q0 = load_q(w[b]);
    const float d0 = _cvtsh_ss(w[b].d);
    for (int t = 0; t < T; ++t) {
      const ActBlock &a = x[t * stride + b];
      even[t] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * a.d), block_dot_avx2<Block>(q0, a), even[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(_mm256_add_ps(even[t], odd[t]));
}

// NAME_simd<Vnni>: a row's dot products through NAME_vnni_t<T> or NAME_avx2_t<T> (the
// kernels' macros define both), T the step's token count.
#define MINFER_SIMD_ROW(NAME, BLOCK, PER)                                                                  \
  template <bool Vnni>                                                                                     \
  void NAME##_simd(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) { \
    const auto *w = static_cast<const BLOCK *>(w_row);                                                     \
    by_tokens(n_tok, [&](auto tag) {                                                                       \
      constexpr int T = decltype(tag)::value;                                                              \
      Vnni ? NAME##_vnni_t<T>(w, x, stride, n / (PER), out) : NAME##_avx2_t<T>(w, x, stride, n / (PER), out); \
    });                                                                                                    \
  }

template <class Block>
void qdot_avx2(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const Block *>(w_row);
  by_tokens(n_tok, [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    qdot_avx2_t<Block, T>(w, x, stride, n / 32, out);
  });
}

// ---- AVX-512 VNNI (256-bit vpdpbusd: unsigned x signed bytes into int32 in one step) ------

#define MINFER_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))

// Q4_0: the nibbles 0..15 are already unsigned: dot(q, a) - 8 * sum(a) = dot(q - 8, a).
MINFER_VNNI inline __m256i nibbles(const minfer_block_q4_0 &w) { return nibbles32(w.qs); }

// acc += dw * d_a * dot(q, a) for unsigned nibbles q; the -8 offset, dw * 8 * d_a * sum(a),
// is summed apart in a scalar (corr) and subtracted once per row.
MINFER_VNNI inline void q4_0_vnni_one(const __m256i q, float dw, const ActBlock &a, __m256 &acc, float &corr) {
  const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs));
  const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, av);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(s), acc);
  corr += dw * a.d_sum;
}

template <int T>
MINFER_VNNI void q4_0_vnni_t(const minfer_block_q4_0 *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {
  __m256 even[T], odd[T];
  float corr[T];
  for (int t = 0; t < T; ++t) even[t] = odd[t] = _mm256_setzero_ps(), corr[t] = 0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch_ahead(w + b);
    const __m256i q0 = nibbles(w[b]), q1 = nibbles(w[b + 1]);
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
    for (int t = 0; t < T; ++t) {
      q4_0_vnni_one(q0, d0, x[t * stride + b], even[t], corr[t]);
      q4_0_vnni_one(q1, d1, x[t * stride + b + 1], odd[t], corr[t]);
    }
  }
  if (b < nb) {
    const __m256i q0 = nibbles(w[b]);
    const float d0 = _cvtsh_ss(w[b].d);
    for (int t = 0; t < T; ++t) q4_0_vnni_one(q0, d0, x[t * stride + b], even[t], corr[t]);
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(_mm256_add_ps(even[t], odd[t])) - 8.0f * corr[t];
}

// Q8_0: signed weights: |w| as the unsigned operand, the activations carrying w's sign.
// acc += dw * d_a * dot(q, a): |q| unsigned, a carrying q's sign.
MINFER_VNNI inline void q8_0_vnni_one(const __m256i q, const __m256i qabs, float dw, const ActBlock &a, __m256 &acc) {
  const __m256i av = _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs)), q);
  acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), qabs, av)), acc);
}

template <int T>
MINFER_VNNI void q8_0_vnni_t(const minfer_block_q8_0 *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {
  __m256 even[T], odd[T];
  for (int t = 0; t < T; ++t) even[t] = odd[t] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch_ahead(w + b);
    const __m256i q0 = load_q(w[b]), q1 = load_q(w[b + 1]);
    const __m256i a0 = _mm256_sign_epi8(q0, q0), a1 = _mm256_sign_epi8(q1, q1);
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
    for (int t = 0; t < T; ++t) {
      q8_0_vnni_one(q0, a0, d0, x[t * stride + b], even[t]);
      q8_0_vnni_one(q1, a1, d1, x[t * stride + b + 1], odd[t]);
    }
  }
  if (b < nb) {
    const __m256i q0 = load_q(w[b]);
    const float d0 = _cvtsh_ss(w[b].d);
    for (int t = 0; t < T; ++t) q8_0_vnni_one(q0, _mm256_sign_epi8(q0, q0), d0, x[t * stride + b], even[t]);
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(_mm256_add_ps(even[t], odd[t]));
}

void q4_0_vnni(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const minfer_block_q4_0 *>(w_row);
  by_tokens(n_tok, [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    q4_0_vnni_t<T>(w, x, stride, n / 32, out);
  });
}

void q8_0_vnni(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const minfer_block_q8_0 *>(w_row);
  by_tokens(n_tok, [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    q8_0_vnni_t<T>(w, x, stride, n / 32, out);
  });
}

// ---- Four weight rows at once (VNNI, Q4_0 and Q8_0) -----------------------------------
// One row at a time, each (block, token) costs a convert, a scale product, a broadcast and
// an FMA beside its single vpdpbusd. With four rows, two rounds of hadd fold the four
// rows' int32 sums into one vector [r0 r1 r2 r3 | r0 r1 r2 r3] (low and high halves of the
// 32 values), so that bookkeeping is paid once for four rows.

MINFER_VNNI inline __m256i fold4(__m256i s0, __m256i s1, __m256i s2, __m256i s3) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
}

// The four rows' block scales, twice: [d0 d1 d2 d3 d0 d1 d2 d3].
template <class Block>
MINFER_VNNI inline __m256 scales4(const Block *const *w, int64_t b) {
  const __m128i h = _mm_setr_epi16(short(w[0][b].d), short(w[1][b].d), short(w[2][b].d), short(w[3][b].d), short(w[0][b].d),
                                   short(w[1][b].d), short(w[2][b].d), short(w[3][b].d));
  return _mm256_cvtph_ps(h);
}

template <int T, bool Q4>
MINFER_VNNI void rows4_vnni_t(const uint8_t *w_rows, int64_t row_bytes, const ActBlock *x, int64_t stride, int64_t nb, float *out) {
  using Block = std::conditional_t<Q4, minfer_block_q4_0, minfer_block_q8_0>;
  const Block *w[4];
  for (int r = 0; r < 4; ++r) w[r] = reinterpret_cast<const Block *>(w_rows + r * row_bytes);
  __m256 acc[T], corr[T];
  for (int t = 0; t < T; ++t) acc[t] = corr[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    for (int r = 0; r < 4; ++r) prefetch_ahead(w[r] + b);
    __m256i q[4], qabs[4];
    for (int r = 0; r < 4; ++r) {
      if constexpr (Q4) {
        q[r] = nibbles(w[r][b]);
      } else {
        q[r] = load_q(w[r][b]);
        qabs[r] = _mm256_sign_epi8(q[r], q[r]);
      }
    }
    const __m256 dw = scales4(w, b);
    for (int t = 0; t < T; ++t) {
      const ActBlock &a = x[t * stride + b];
      const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs));
      __m256i s[4];
      for (int r = 0; r < 4; ++r) {
        if constexpr (Q4) s[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q[r], av);
        else s[r] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), qabs[r], _mm256_sign_epi8(av, q[r]));
      }
      const __m256 sum = _mm256_cvtepi32_ps(fold4(s[0], s[1], s[2], s[3]));
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a.d)), sum, acc[t]);
      // Q4_0's nibbles carry +8: dw * 8 * d_a * sum(a) comes off at the end.
      if constexpr (Q4) corr[t] = _mm256_fmadd_ps(dw, _mm256_set1_ps(a.d_sum), corr[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(acc[t]), _mm256_extractf128_ps(acc[t], 1));
    if constexpr (Q4) r4 = _mm_fnmadd_ps(_mm_set1_ps(8.0f), _mm256_castps256_ps128(corr[t]), r4);
    _mm_storeu_ps(out + t * 4, r4);
  }
}

template <bool Q4>
void rows4_vnni(const uint8_t *w_rows, int64_t row_bytes, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  by_tokens(n_tok, [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    rows4_vnni_t<T, Q4>(w_rows, row_bytes, x, stride, n / 32, out);
  });
}

// ---- Q4_K: 8 sub-blocks of 32 with 6-bit (scale, min); value = d*sc*q - dmin*m ----------
// Per sub-block j with activations a_j: d_aj * (d*sc_j*dot(q_j, a_j) - dmin*m_j*sum(a_j)).
// The dot of unsigned nibbles goes in the vector accumulator; the min term is a scalar.

inline void q4_k_scales(const minfer_block_q4_k &w, float d, float dmin, float *dsc, float *dm) {
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    sdk::k4_scale_min(w.scales, j, sc, m);
    dsc[j] = d * float(sc);
    dm[j] = dmin * float(m);
  }
}

// The same with the 6-bit fields pulled out four at a time from 32-bit words (bytes 0-3 hold
// sc0-3 and the top bits of sc4-7, bytes 4-7 m0-3 and the top bits of m4-7, bytes 8-11 the
// low nibbles of sc4-7 and m4-7), then scaled 8 lanes at once: decoding them one by one took
// as many instructions as the block's dot products (minfer-bench --op matmul q4_k 2048 x 65536,
// 1 token, AMD EPYC Zen 4, 2 threads: 5031-5899 us before, 3505-3836 after).
// Q5_K's scales are Q4_K's (same fields).
template <class Block>
__attribute__((target("avx2,fma,f16c"))) inline void q4_k_scales_simd(const Block &w, float *dsc, float *dm) {
  uint32_t u[3];
  std::memcpy(u, w.scales, 12);
  const uint32_t six = 0x3f3f3f3fu, four = 0x0f0f0f0fu, two = 0x03030303u;
  const uint32_t sc03 = u[0] & six, m03 = u[1] & six;
  const uint32_t sc47 = (u[2] & four) | (((u[0] >> 6) & two) << 4), m47 = ((u[2] >> 4) & four) | (((u[1] >> 6) & two) << 4);
  const __m128i sc = _mm_setr_epi32(int(sc03), int(sc47), 0, 0), m = _mm_setr_epi32(int(m03), int(m47), 0, 0);
  _mm256_storeu_ps(dsc, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w.d)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc))));
  _mm256_storeu_ps(dm, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w.dmin)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m))));
}

void q4_k_scalar(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const minfer_block_q4_k *>(w_row);
  for (int t = 0; t < n_tok; ++t) {
    float sum = 0;
    for (int64_t b = 0; b < n / 256; ++b) {
      float dsc[8], dm[8];
      q4_k_scales(w[b], sdk::half_to_float(w[b].d), sdk::half_to_float(w[b].dmin), dsc, dm);
      for (int j = 0; j < 8; ++j) {
        const ActBlock &a = x[t * stride + b * 8 + j];
        int32_t dot = 0;
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = w[b].qs[32 * (j / 2) + l];
          dot += int((j & 1) ? byte >> 4 : byte & 15) * a.qs[l];
        }
        sum += a.d * (dsc[j] * float(dot) - dm[j] * float(a.sum));
      }
    }
    out[t] = sum;
  }
}

// u8 x s8 -> 8 int32 lanes: maddubs takes the nibbles as the unsigned operand directly.
__attribute__((target("avx2,fma"))) inline __m256i dot_u8_i8_avx2(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
MINFER_VNNI inline __m256i dot_u8_i8_vnni(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

// Q4_K and Q5_K (whose values take a fifth bit from qh) under AVX-512 VNNI: DOT is the u8 x
// s8 dot above (vpdpbusd; AVX2's own kernel follows).
#define MINFER_Q4_K_KERNEL(NAME, TARGET, DOT)                                                                    \
  template <int T, class Block>                                                                               \
  TARGET void NAME(const Block *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {               \
    constexpr bool kFifth = std::is_same_v<Block, minfer_block_q5_k>;                                         \
    __m256 acc[T];                                                                                            \
    float corr[T];                                                                                            \
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps(), corr[t] = 0;                                    \
    const __m256i low4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);                               \
    for (int64_t b = 0; b < nb; ++b) {                                                                        \
      prefetch_ahead(w + b);                                                                                  \
      float dsc[8], dm[8];                                                                                    \
      q4_k_scales_simd(w[b], dsc, dm);                                                                        \
      __m256i qh = _mm256_setzero_si256();                                                                    \
      if constexpr (kFifth) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].qh));              \
      for (int g = 0; g < 4; ++g) {                                                                           \
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].qs + 32 * g));       \
        __m256i lo = _mm256_and_si256(bytes, low4), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4); \
        if constexpr (kFifth) { /* bits 0 and 1 of qh to bit 4, then the next two down (16-bit shifts */       \
          /* by at most 4 keep each byte's bits 0, 1 and 4 its own) */                                        \
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));                          \
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));                          \
          qh = _mm256_srli_epi16(qh, 2);                                                                      \
        }                                                                                                     \
        for (int t = 0; t < T; ++t) {                                                                         \
          const ActBlock &a0 = x[t * stride + b * 8 + 2 * g], &a1 = x[t * stride + b * 8 + 2 * g + 1];        \
          const __m256i s0 = DOT(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a0.qs)));          \
          const __m256i s1 = DOT(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a1.qs)));          \
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dsc[2 * g] * a0.d), _mm256_cvtepi32_ps(s0), acc[t]);        \
          acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dsc[2 * g + 1] * a1.d), _mm256_cvtepi32_ps(s1), acc[t]);    \
          corr[t] += dm[2 * g] * a0.d_sum + dm[2 * g + 1] * a1.d_sum;                                         \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
    for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]) - corr[t];                                              \
  }

MINFER_Q4_K_KERNEL(q4_k_vnni_t, MINFER_VNNI, dot_u8_i8_vnni)
#undef MINFER_Q4_K_KERNEL

// AVX2 (Q5_K's rows; Q4_K's where its panels do not fit) is bound by instructions, so the
// six-bit scales go in as vpmaddwd's int16 factors (picked for a sub-block by one vpshufb from
// the block's eight) where the ones-vector's madd was followed by a scalar d * scale * d_x
// broadcast each sub-block, and the block's d multiplies its sum once (as q6_k_avx2_t does).
template <int T, class Block>
__attribute__((target("avx2,fma,f16c"))) void q4_k_avx2_t(const Block *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {
  constexpr bool kFifth = std::is_same_v<Block, minfer_block_q5_k>;
  __m256 acc[T];
  float corr[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps(), corr[t] = 0;
  const __m256i low4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    uint32_t u[3];
    std::memcpy(u, w[b].scales, 12);
    const uint32_t six = 0x3f3f3f3fu, four = 0x0f0f0f0fu, two = 0x03030303u;
    const uint32_t sc03 = u[0] & six, m03 = u[1] & six;
    const uint32_t sc47 = (u[2] & four) | (((u[0] >> 6) & two) << 4), m47 = ((u[2] >> 4) & four) | (((u[1] >> 6) & two) << 4);
    // The eight scales as int16, the same in both 128-bit lanes (vpshufb stays in a lane).
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_setr_epi32(int(sc03), int(sc47), 0, 0)));
    alignas(32) float dm[8];
    _mm256_store_ps(dm, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(w[b].dmin)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32(int(m03), int(m47), 0, 0)))));
    __m256 blk[T];  // this block's sum before its d
    for (int t = 0; t < T; ++t) blk[t] = _mm256_setzero_ps();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifth) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].qh));
    for (int g = 0; g < 4; ++g) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].qs + 32 * g));
      __m256i lo = _mm256_and_si256(bytes, low4), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      if constexpr (kFifth) {  // bits 0 and 1 of qh to bit 4, then the next two down (16-bit shifts by
        // at most 4 keep each byte's bits 0, 1 and 4 its own)
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      // Sub-block 2g's scale and 2g + 1's, each int16 over all 16 lanes.
      const __m256i sc0 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(short(4 * g | (4 * g + 1) << 8)));
      const __m256i sc1 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(short((4 * g + 2) | (4 * g + 3) << 8)));
      for (int t = 0; t < T; ++t) {
        const ActBlock &a0 = x[t * stride + b * 8 + 2 * g], &a1 = x[t * stride + b * 8 + 2 * g + 1];
        // u <= 31 and |a| <= 127: a pair's sum fits int16, its product with a scale <= 63 int32.
        const __m256i s0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a0.qs))), sc0);
        const __m256i s1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a1.qs))), sc1);
        blk[t] = _mm256_fmadd_ps(_mm256_set1_ps(a0.d), _mm256_cvtepi32_ps(s0), blk[t]);
        blk[t] = _mm256_fmadd_ps(_mm256_set1_ps(a1.d), _mm256_cvtepi32_ps(s1), blk[t]);
        corr[t] += dm[2 * g] * a0.d_sum + dm[2 * g + 1] * a1.d_sum;
      }
    }
    const __m256 dw = _mm256_set1_ps(_cvtsh_ss(w[b].d));
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(dw, blk[t], acc[t]);
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]) - corr[t];
}

MINFER_SIMD_ROW(q4_k, minfer_block_q4_k, 256)
// Q5_K on the same kernel (under AVX-512 its weights sit in panels; this serves AVX2).
template <bool Vnni>
void q5_k_simd(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const minfer_block_q5_k *>(w_row);
  by_tokens(n_tok, [&](auto tag) {
    constexpr int T = decltype(tag)::value;
    Vnni ? q4_k_vnni_t<T>(w, x, stride, n / 256, out) : q4_k_avx2_t<T>(w, x, stride, n / 256, out);
  });
}

// ---- Q5_0: value = d * ((nibble | high bit << 4) - 16) ------------------------------------
// The 5-bit values are used unsigned (0..31); the -16 offset is a scalar per row.

void q5_0_scalar(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const minfer_block_q5_0 *>(w_row);
  for (int t = 0; t < n_tok; ++t) {
    float sum = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
      const ActBlock &a = x[t * stride + b];
      const uint32_t qh = uint32_t(w[b].qh[0]) | uint32_t(w[b].qh[1]) << 8 | uint32_t(w[b].qh[2]) << 16 | uint32_t(w[b].qh[3]) << 24;
      int32_t dot = 0;
      for (int j = 0; j < 32; ++j) {
        const int nib = j < 16 ? (w[b].qs[j] & 15) : (w[b].qs[j - 16] >> 4);
        dot += (nib | int((qh >> j) & 1) << 4) * a.qs[j];
      }
      sum += sdk::half_to_float(w[b].d) * a.d * (float(dot) - 16.0f * float(a.sum));
    }
    out[t] = sum;
  }
}

#define MINFER_Q5_0_KERNEL(NAME, TARGET, DOT)                                                                   \
  template <int T>                                                                                            \
  TARGET void NAME(const minfer_block_q5_0 *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {   \
    __m256 acc[T];                                                                                            \
    float corr[T];                                                                                            \
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps(), corr[t] = 0;                                    \
    for (int64_t b = 0; b < nb; ++b) {                                                                        \
      prefetch_ahead(w + b);                                                                                  \
      const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w[b].qs));                     \
      const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0f)); \
      const __m256i q = _mm256_or_si256(nib, high_bits_0x10(w[b].qh));                                        \
      const float dw = _cvtsh_ss(w[b].d);                                                                     \
      for (int t = 0; t < T; ++t) {                                                                           \
        const ActBlock &a = x[t * stride + b];                                                                \
        const __m256i s = DOT(q, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs)));               \
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), _mm256_cvtepi32_ps(s), acc[t]);                    \
        corr[t] += dw * a.d_sum;                                                                              \
      }                                                                                                       \
    }                                                                                                         \
    for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]) - 16.0f * corr[t];                                      \
  }

MINFER_Q5_0_KERNEL(q5_0_avx2_t, __attribute__((target("avx2,fma,f16c"))), dot_u8_i8_avx2)
MINFER_Q5_0_KERNEL(q5_0_vnni_t, MINFER_VNNI, dot_u8_i8_vnni)
#undef MINFER_Q5_0_KERNEL

MINFER_SIMD_ROW(q5_0, minfer_block_q5_0, 32)

// ---- Q6_K: 16 sub-blocks of 16 with int8 scales; q = (4 low | 2 high bits) - 32 -----------
// Activation block j (32 values) covers sub-blocks 2j and 2j+1: the dot's lanes 0-3 hold
// values 0-15 and lanes 4-7 values 16-31, so a two-valued scale vector applies both scales.

// The 32 unsigned 6-bit values of activation block j (0..7) of a Q6_K block.
inline void q6_k_values(const minfer_block_q6_k &w, int j, uint8_t *q) {
  const int half = j / 4, quarter = j % 4;
  const uint8_t *ql = w.ql + 64 * half + 32 * (quarter & 1), *qh = w.qh + 32 * half;
  for (int l = 0; l < 32; ++l) {
    const int low = quarter < 2 ? (ql[l] & 15) : (ql[l] >> 4);
    q[l] = uint8_t(low | ((qh[l] >> (2 * quarter)) & 3) << 4);
  }
}

void q6_k_scalar(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const minfer_block_q6_k *>(w_row);
  for (int t = 0; t < n_tok; ++t) {
    float sum = 0;
    for (int64_t b = 0; b < n / 256; ++b) {
      const float d = sdk::half_to_float(w[b].d);
      for (int j = 0; j < 8; ++j) {
        const ActBlock &a = x[t * stride + b * 8 + j];
        uint8_t q[32];
        q6_k_values(w[b], j, q);
        int32_t dot0 = 0, dot1 = 0;
        for (int l = 0; l < 16; ++l) dot0 += (int(q[l]) - 32) * a.qs[l], dot1 += (int(q[l + 16]) - 32) * a.qs[l + 16];
        sum += d * a.d * (float(w[b].scales[2 * j]) * float(dot0) + float(w[b].scales[2 * j + 1]) * float(dot1));
      }
    }
    out[t] = sum;
  }
}

// Block j's 32 values as unsigned bytes (0..63), vectorized q6_k_values.
__attribute__((target("avx2"))) inline __m256i q6_k_vec(const minfer_block_q6_k &w, int j) {
  const int half = j / 4, quarter = j % 4;
  const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w.ql + 64 * half + 32 * (quarter & 1)));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w.qh + 32 * half));
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
  const __m256i low = quarter < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), m2);
  return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));  // high <= 3: the shift stays in its byte
}

// d * scales[i] for the 16 sub-blocks of a Q6_K block.
__attribute__((target("avx2,fma,f16c"))) inline void q6_k_scales_simd(const minfer_block_q6_k &w, float *ds) {
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w.scales));
  const __m256 d = _mm256_set1_ps(_cvtsh_ss(w.d));
  _mm256_store_ps(ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
  _mm256_store_ps(ds + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc)))));
}

#define MINFER_Q6_K_KERNEL(NAME, TARGET, DOT)                                                                   \
  template <int T>                                                                                            \
  TARGET void NAME(const minfer_block_q6_k *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {   \
    __m256 acc[T];                                                                                            \
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();                                                 \
    const __m256i k32 = _mm256_set1_epi8(32);                                                                 \
    for (int64_t b = 0; b < nb; ++b) {                                                                        \
      prefetch_ahead(w + b);                                                                                  \
      alignas(32) float ds[16]; /* the 16 scales times d, 8 at a time */                                     \
      q6_k_scales_simd(w[b], ds);                                                                             \
      for (int j = 0; j < 8; ++j) {                                                                           \
        const __m256i q = q6_k_vec(w[b], j);                                                                  \
        const __m256 sc = _mm256_set_m128(_mm_broadcast_ss(ds + 2 * j + 1), _mm_broadcast_ss(ds + 2 * j));    \
        for (int t = 0; t < T; ++t) {                                                                         \
          const ActBlock &a = x[t * stride + b * 8 + j];                                                      \
          const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs));                    \
          const __m256i s = _mm256_sub_epi32(DOT(q, av), DOT(k32, av)); /* dot(q - 32, a) per lane */        \
          acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(sc, _mm256_set1_ps(a.d)), _mm256_cvtepi32_ps(s), acc[t]);    \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
    for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]);                                                        \
  }

MINFER_Q6_K_KERNEL(q6_k_vnni_t, MINFER_VNNI, dot_u8_i8_vnni)
#undef MINFER_Q6_K_KERNEL

// The AVX2 rows of the types with a scale per 16 values (Q6_K, Q3_K): bound by vector
// instructions, so a sub-block costs few. The offset comes off in int16 (maddubs(v, x) -
// maddubs(off, x): a pair's (v - off) x stays within int16), the two 16-value scales go in as
// vpmaddwd's int16 factors (picked from the block's by one vpshufb), and the block's d
// multiplies its sum once.

// Eight signed byte scales as int16, the same in both 128-bit lanes (vpshufb stays in a lane).
__attribute__((target("avx2"))) inline __m256i scales_int16(__m128i sc8) { return _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8)); }

// Sub-block j's two scales (2j, 2j + 1 of the block's 16: s07 holds 0..7, s815 8..15) over its
// eight pair sums' lanes: values 0..15 (the low lane) take 2j, 16..31 2j + 1.
__attribute__((target("avx2"))) inline __m256i sub16_scales(__m256i s07, __m256i s815, int j) {
  const int e = 2 * (j % 4);
  const __m256i pick = _mm256_setr_epi8(2 * e, 2 * e + 1, 2 * e, 2 * e + 1, 2 * e, 2 * e + 1, 2 * e, 2 * e + 1, 2 * e, 2 * e + 1, 2 * e,
                                        2 * e + 1, 2 * e, 2 * e + 1, 2 * e, 2 * e + 1, 2 * e + 2, 2 * e + 3, 2 * e + 2, 2 * e + 3, 2 * e + 2,
                                        2 * e + 3, 2 * e + 2, 2 * e + 3, 2 * e + 2, 2 * e + 3, 2 * e + 2, 2 * e + 3, 2 * e + 2, 2 * e + 3,
                                        2 * e + 2, 2 * e + 3);
  return _mm256_shuffle_epi8(j < 4 ? s07 : s815, pick);
}

// blk[t] += d_x * (scj . ((v - off) x)) per lane, for each token's activation block x[t * stride].
template <int T>
__attribute__((target("avx2,fma"))) inline void offset_scaled_dots(__m256i v, __m256i off, __m256i scj, const ActBlock *x, int64_t stride,
                                                                   __m256 *blk) {
  for (int t = 0; t < T; ++t) {
    const ActBlock &a = x[t * stride];
    const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs));
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(v, av), _mm256_maddubs_epi16(off, av));
    blk[t] = _mm256_fmadd_ps(_mm256_set1_ps(a.d), _mm256_cvtepi32_ps(_mm256_madd_epi16(p, scj)), blk[t]);
  }
}

// Q6_K: values 0..63, offset 32 (a Q6_K row at ~18 GB/s where the VNNI panels stream 22 before
// the int16 scales). A half's four sub-blocks share its loads of ql and qh, and each one's high
// bits come to bits 4-5 by one shift and a mask.
template <int T>
__attribute__((target("avx2,fma,f16c"))) void q6_k_avx2_t(const minfer_block_q6_k *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i k32 = _mm256_set1_epi8(32), m4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w[b].scales));
    const __m256i s07 = scales_int16(sc), s815 = scales_int16(_mm_unpackhi_epi64(sc, sc));
    __m256 blk[T];  // this block's sum before its d
    for (int t = 0; t < T; ++t) blk[t] = _mm256_setzero_ps();
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].qh + 32 * h));
      // Sub-block 4h + q: the low or high nibbles of l0 or l1, qh's bits 2q..2q+1 at 4-5.
      const __m256i v[4] = {_mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)),
                            _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, bits45)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45))};
      for (int q = 0; q < 4; ++q) {
        const int j = 4 * h + q;
        offset_scaled_dots<T>(v[q], k32, sub16_scales(s07, s815, j), x + b * 8 + j, stride, blk);
      }
    }
    const __m256 dw = _mm256_set1_ps(_cvtsh_ss(w[b].d));
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(dw, blk[t], acc[t]);
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]);
}

// Q3_K: values 0..7 (two bits from qs, the third from hmask), offset 4, six-bit signed scales.
// The GEMM units' row dots (int8_gemm.cpp) it replaces under AVX2 spent a float multiply and
// broadcast per 16 values on the scales and the offset.
template <int T>
__attribute__((target("avx2,fma,f16c"))) void q3_k_avx2_t(const minfer_block_q3_k *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const __m256i k4 = _mm256_set1_epi8(4), m3 = _mm256_set1_epi8(0x03), bit2 = _mm256_set1_epi8(0x04);
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_ahead(w + b);
    const __m128i sc = q3_k_scales16(w[b].scales);
    const __m256i s07 = scales_int16(sc), s815 = scales_int16(_mm_unpackhi_epi64(sc, sc));
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].hmask));
    __m256 blk[T];  // this block's sum before its d
    for (int t = 0; t < T; ++t) blk[t] = _mm256_setzero_ps();
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w[b].qs + 32 * h));
      for (int q = 0; q < 4; ++q) {
        const int j = 4 * h + q;  // values 32j..32j+31: bits 2q of qs[32h + l], bit j of hmask[l]
        const __m256i crumbs = _mm256_and_si256(q == 0 ? qs : _mm256_srli_epi16(qs, 2 * q), m3);
        const __m256i third = _mm256_and_si256(j < 2 ? _mm256_slli_epi16(hm, 2 - j) : j == 2 ? hm : _mm256_srli_epi16(hm, j - 2), bit2);
        const __m256i v = _mm256_or_si256(crumbs, third);
        offset_scaled_dots<T>(v, k4, sub16_scales(s07, s815, j), x + b * 8 + j, stride, blk);
      }
    }
    const __m256 dw = _mm256_set1_ps(_cvtsh_ss(w[b].d));
    for (int t = 0; t < T; ++t) acc[t] = _mm256_fmadd_ps(dw, blk[t], acc[t]);
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(acc[t]);
}

void q3_k_avx2(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const minfer_block_q3_k *>(w_row);
  by_tokens(n_tok, [&](auto tag) { q3_k_avx2_t<decltype(tag)::value>(w, x, stride, n / 256, out); });
}

MINFER_SIMD_ROW(q6_k, minfer_block_q6_k, 256)
#undef MINFER_SIMD_ROW

bool has_vnni() {
  static const bool yes = __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                          __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return yes;
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return yes;
}

// AVX-VNNI (the VEX vpdpbusd): CPUID leaf 7, subleaf 1, EAX bit 4 (GCC 12's
// __builtin_cpu_supports does not name it).
bool has_avx_vnni() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!has_avx2() || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return (a >> 4 & 1u) != 0;
  }();
  return yes;
}

}  // namespace

namespace {

void quantize_activations_scalar(const float *x, ActBlock *out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float *v = x + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(v[j]));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    int32_t sum = 0, sum_lo = 0;
    for (int j = 0; j < 32; ++j) {
      sum += out[b].qs[j] = int8_t(std::nearbyint(v[j] * id));
      if (j == 15) sum_lo = sum;
    }
    out[b].sum = sum;
    out[b].d_sum = d * float(sum);
    out[b].d_sum_lo = d * float(sum_lo);
  }
}

__attribute__((target("avx2,fma"))) inline int32_t hsum_epi32(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i s2 = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xb1)));
}

// The same values as the scalar loop (cvtps rounds to nearest even, as nearbyint does in the
// default rounding mode): a prompt step quantizes tokens x k values per matmul, and the
// scalar loop's libm calls cost a third of the GEMM's time.
__attribute__((target("avx2,fma"))) void quantize_activations_avx2(const float *x, ActBlock *out, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float *v = x + b * 32;
    __m256 f[4];
    for (int i = 0; i < 4; ++i) f[i] = _mm256_loadu_ps(v + 8 * i);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, f[0]), _mm256_andnot_ps(sign, f[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, f[2]), _mm256_andnot_ps(sign, f[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(f[i], _mm256_set1_ps(id)));
    // packs interleave the 128-bit lanes: bytes come out as dwords 0 4 1 5 2 6 3 7.
    const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(out[b].qs), p8);
    const int32_t sum_lo = hsum_epi32(_mm256_add_epi32(q[0], q[1]));
    const int32_t sum = sum_lo + hsum_epi32(_mm256_add_epi32(q[2], q[3]));
    out[b].d = d;
    out[b].sum = sum;
    out[b].d_sum = d * float(sum);
    out[b].d_sum_lo = d * float(sum_lo);
  }
}

}  // namespace

void quantize_activations(const float *x, ActBlock *out, int64_t n, Isa isa) {
  if (isa == Isa::Scalar) return quantize_activations_scalar(x, out, n);
  quantize_activations_avx2(x, out, n);
}

Isa best_isa() {
  return has_vnni() && amx_available() ? Isa::Amx
         : has_vnni()                   ? Isa::Avx512Vnni
         : has_avx_vnni()               ? Isa::AvxVnni
         : has_avx2()                   ? Isa::Avx2
                                        : Isa::Scalar;
}

bool isa_available(Isa isa) {
  switch (isa) {
    case Isa::Amx: return has_vnni() && amx_available();
    case Isa::Avx512Vnni: return has_vnni();
    case Isa::AvxVnni: return has_avx_vnni();
    case Isa::Avx2: return has_avx2();
    default: return true;
  }
}

const char *isa_name(Isa isa) {
  switch (isa) {
    case Isa::Amx: return "amx";
    case Isa::Avx512Vnni: return "avx512vnni";
    case Isa::AvxVnni: return "avxvnni";
    case Isa::Avx2: return "avx2";
    default: return "scalar";
  }
}

namespace {
__attribute__((target("avx2,f16c"))) void halves_to_floats_f16c(const uint16_t *h, float *f, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
  for (; i < n; ++i) f[i] = sdk::half_to_float(h[i]);
}
}  // namespace

QDot4Fn qdot4_for(int32_t dtype, Isa isa) {
  if (isa < Isa::Avx512Vnni) return nullptr;
  if (dtype == MINFER_DTYPE_Q4_0) return rows4_vnni<true>;
  if (dtype == MINFER_DTYPE_Q8_0) return rows4_vnni<false>;
  return nullptr;
}

void halves_to_floats(const uint16_t *h, float *f, int64_t n, Isa isa) {
  if (isa != Isa::Scalar) return halves_to_floats_f16c(h, f, n);
  for (int64_t i = 0; i < n; ++i) f[i] = sdk::half_to_float(h[i]);
}

QDotFn qdot_for(int32_t dtype, Isa isa) {
  const bool vnni = isa >= Isa::Avx512Vnni, avx2 = avx2_family(isa);  // one token's dots are memory-bound: AVX-VNNI keeps AVX2's
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: return vnni ? q4_0_vnni : avx2 ? qdot_avx2<minfer_block_q4_0> : qdot_scalar<minfer_block_q4_0>;
    case MINFER_DTYPE_Q8_0: return vnni ? q8_0_vnni : avx2 ? qdot_avx2<minfer_block_q8_0> : qdot_scalar<minfer_block_q8_0>;
    case MINFER_DTYPE_Q4_K: return vnni ? q4_k_simd<true> : avx2 ? q4_k_simd<false> : q4_k_scalar;
    case MINFER_DTYPE_Q5_0: return vnni ? q5_0_simd<true> : avx2 ? q5_0_simd<false> : q5_0_scalar;
    case MINFER_DTYPE_Q6_K: return vnni ? q6_k_simd<true> : avx2 ? q6_k_simd<false> : q6_k_scalar;
    case MINFER_DTYPE_Q5_K: return vnni ? q5_k_simd<true> : avx2 ? q5_k_simd<false> : nullptr;
    case MINFER_DTYPE_Q3_K: return avx2 && !vnni ? q3_k_avx2 : unit_row_dots(dtype, isa);
    default: return unit_row_dots(dtype, isa);  // the other block types, on the GEMM's units (int8_gemm.hpp)
  }
}

}  // namespace minfer::cpu
