// plugins/cuda/kernels/rope.cuh — the rotary embedding's arithmetic, shared by the RoPE kernel
// (rope.cu) and the one-token attention kernel that rotates its query and key itself.
#pragma once

#include <cstdint>

#include "launchers.h"

namespace minfer::cuda {

// Pair i of a head at position p turns by p * theta_base^(-2i/n_dims) * freq_scale; the angle
// is formed in double because positions reach 10^5 and a float frequency would drift by
// radians. Reduced to [-pi, pi] in double, its sine and cosine are float-exact (a double
// sin and cos cost microseconds of latency in the one-token attention kernel).
// The frequency is split out so a kernel rotating many positions computes each pair's once.
__device__ __forceinline__ double rope_frequency(int32_t i, const minfer_cuda_rope &r) {
  const double f = exp(-2.0 * double(i) / double(r.n_dims) * log(double(r.theta_base))) * double(r.freq_scale);
  return r.freq_factors ? f / double(r.freq_factors[i]) : f;  // Llama 3.1+'s rope_freqs
}
// cos and sin scaled by mscale (LongRoPE's attention factor; 1 for the rest), as ggml scales them.
__device__ __forceinline__ void rope_cos_sin_at(int32_t pos, double frequency, float mscale, float &c, float &s) {
  constexpr double kTwoPi = 6.283185307179586;
  const double theta = double(pos) * frequency;
  sincosf(float(theta - kTwoPi * rint(theta / kTwoPi)), &s, &c);
  c *= mscale, s *= mscale;
}
__device__ __forceinline__ void rope_cos_sin(int32_t pos, int32_t i, const minfer_cuda_rope &r, float &c, float &s) {
  rope_cos_sin_at(pos, rope_frequency(i, r), r.mscale, c, s);
}

// The rotated pair (a, b) of pair i: mode 2 (NeoX) pairs dims i and i + n_dims/2, else 2i, 2i+1.
__device__ __forceinline__ void rope_pair_dims(int32_t i, const minfer_cuda_rope &r, int32_t &a, int32_t &b) {
  a = r.mode == 2 ? i : 2 * i;
  b = r.mode == 2 ? i + r.n_dims / 2 : 2 * i + 1;
}

// The pair dim d (< n_dims) belongs to.
__device__ __forceinline__ int32_t rope_pair_of(int32_t d, const minfer_cuda_rope &r) { return r.mode == 2 ? d % (r.n_dims / 2) : d / 2; }

// Dim d of a rotated head whose unrotated values are x[0..head_dim); cs[i]: pair i's (cos, sin).
// Dims past n_dims pass. nw (optional): the head RMS-normalized first, x[j] * scale * nw[j]
// (scale: 1 / sqrt(mean(x^2) + eps) of the head).
__device__ __forceinline__ float rope_value(const float *x, int32_t d, const minfer_cuda_rope &r, const float2 *cs,
                                            const float *nw = nullptr, float scale = 1.0f) {
  const auto at = [&](int32_t j) { return nw ? x[j] * scale * nw[j] : x[j]; };
  if (d >= r.n_dims) return at(d);
  const int32_t i = rope_pair_of(d, r);
  int32_t a, b;
  rope_pair_dims(i, r, a, b);
  const float c = cs[i].x, s = cs[i].y;
  return d == a ? at(a) * c - at(b) * s : at(a) * s + at(b) * c;
}

}  // namespace minfer::cuda
