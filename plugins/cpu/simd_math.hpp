// plugins/cpu/simd_math.hpp — AVX-512 and AVX2 helpers the op families share.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <initializer_list>

#define MINFER_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))
#define MINFER_AVX2_FMA __attribute__((target("avx2,fma,f16c")))

namespace minfer::cpu {

// e^x, relative error ~2e-7: 2^n * e^r with r = x - n ln2 in [-ln2/2, ln2/2] and e^r from its
// Taylor series to r^6 (the last term ~1e-7 there). Clamped to where e^x is 0 or inf as a
// float, so +-inf give inf and 0 as std::exp does; the constant first keeps NaN a NaN.
MINFER_AVX512 inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(89.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 in two parts so n * ln2 is subtracted exactly
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  for (float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
  return _mm512_scalef_ps(p, n);
}

// exp512 on 8 lanes. AVX2 has no scalef: 2^n is built in the exponent field, in two halves
// (n in [-150, 128] after the clamp; each half stays a normal float), so the extremes still
// round to 0 and overflow to inf as exp512's do.
MINFER_AVX2_FMA inline __m256 pow2_256(__m256i e) {  // 2^e for e in [-126, 127]
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}
MINFER_AVX2_FMA inline __m256 exp256(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), _mm256_min_ps(_mm256_set1_ps(89.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  for (float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
  const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2_256(n1)), pow2_256(n2));
}

// 16 values as f32, from f32 or f16 storage.
MINFER_AVX512 inline __m512 load16(const float *p) { return _mm512_loadu_ps(p); }
MINFER_AVX512 inline __m512 load16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }

}  // namespace minfer::cpu
