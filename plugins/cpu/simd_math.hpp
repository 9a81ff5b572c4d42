// plugins/cpu/simd_math.hpp — AVX-512 helpers the op families share.
#pragma once

#include <immintrin.h>

#include <cstdint>

#define MINFER_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma,f16c")))

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

// 16 values as f32, from f32 or f16 storage.
MINFER_AVX512 inline __m512 load16(const float *p) { return _mm512_loadu_ps(p); }
MINFER_AVX512 inline __m512 load16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }

}  // namespace minfer::cpu
