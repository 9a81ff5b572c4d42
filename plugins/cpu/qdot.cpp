#include "qdot.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstddef>

#include "minfer/blocks.h"
#include "minfer/decode.hpp"

namespace minfer::cpu {
namespace {

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

// Scales of 8 consecutive weight blocks, f16 -> f32, in one conversion.
template <class Block>
__attribute__((target("avx2,f16c"))) inline void load_scales(const Block *w, float *d8) {
  alignas(16) uint16_t h[8];
  for (int i = 0; i < 8; ++i) h[i] = w[i].d;
  _mm256_store_ps(d8, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i *>(h))));
}

template <class Block, int T>
__attribute__((target("avx2,fma,f16c"))) void qdot_avx2_t(const Block *w, const ActBlock *x, int64_t stride, int64_t nb, float *out) {
  // Two accumulators per token: consecutive blocks' FMAs do not wait on each other.
  __m256 acc[T][2];
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
  alignas(32) float d8[8];
  for (int64_t b = 0; b < nb; ++b) {
    if ((b & 7) == 0) {
      if (b + 8 <= nb) load_scales(w + b, d8);
      else
        for (int64_t i = b; i < nb; ++i) d8[i - b] = _cvtsh_ss(w[i].d);
    }
    const __m256i q = load_q(w[b]);
    const float dw = d8[b & 7];
    for (int t = 0; t < T; ++t) {
      const ActBlock &a = x[t * stride + b];
      const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a.qs));
      acc[t][b & 1] = _mm256_fmadd_ps(_mm256_set1_ps(dw * a.d), dot_i8_ps(q, av), acc[t][b & 1]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
}

template <class Block>
void qdot_avx2(const void *w_row, const ActBlock *x, int64_t stride, int n_tok, int64_t n, float *out) {
  const auto *w = static_cast<const Block *>(w_row);
  switch (n_tok) {
    case 1: return qdot_avx2_t<Block, 1>(w, x, stride, n / 32, out);
    case 2: return qdot_avx2_t<Block, 2>(w, x, stride, n / 32, out);
    case 3: return qdot_avx2_t<Block, 3>(w, x, stride, n / 32, out);
    default: return qdot_avx2_t<Block, 4>(w, x, stride, n / 32, out);
  }
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return yes;
}

}  // namespace

void quantize_activations(const float *x, ActBlock *out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float *v = x + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(v[j]));
    const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
    out[b].d = d;
    for (int j = 0; j < 32; ++j) out[b].qs[j] = int8_t(std::nearbyint(v[j] * id));
  }
}

QDotFn qdot_for(int32_t dtype) {
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: return has_avx2() ? qdot_avx2<minfer_block_q4_0> : qdot_scalar<minfer_block_q4_0>;
    case MINFER_DTYPE_Q8_0: return has_avx2() ? qdot_avx2<minfer_block_q8_0> : qdot_scalar<minfer_block_q8_0>;
    default: return nullptr;
  }
}

const char *qdot_isa() { return has_avx2() ? "avx2" : "scalar"; }

}  // namespace minfer::cpu
