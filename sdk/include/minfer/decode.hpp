// minfer/decode.hpp — decoders for every block type, usable on the host and in CUDA kernels.
//
// Each decode_block(block, put) calls put(i, value) for i in 0..block_values-1. Taking a sink
// instead of an output array lets a GPU thread write each value straight to memory (as f16,
// say) without staging 256 floats in local memory.
#pragma once

#include <cstdint>
#include <cstring>

#include "minfer/blocks.h"
#include "minfer/dtype.h"

#if defined(__CUDACC__)
#define MINFER_HD __host__ __device__ __forceinline__
#include <cuda_fp16.h>
#else
#define MINFER_HD inline
#endif

namespace minfer::sdk {

// IEEE half bits -> float, exact for every input (subnormals, inf, NaN).
MINFER_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: mant * 2^-24
      float v = float(mant) * 5.9604644775390625e-8f;
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

// float -> IEEE half bits, round to nearest even; overflow to inf, NaN stays NaN.
MINFER_HD uint16_t float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t out;
  if (u >= (127u + 16u) << 23) {  // >= 65536, inf or NaN
    out = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < (113u << 23)) {  // below the smallest normal half: let the FPU round
    const uint32_t magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float magic, v;
    std::memcpy(&magic, &magic_bits, 4);
    std::memcpy(&v, &u, 4);
    v += magic;
    std::memcpy(&u, &v, 4);
    out = u - magic_bits;
  } else {
    const uint32_t mant_odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xfffu + mant_odd;
    out = u >> 13;
  }
  return uint16_t(out | (sign >> 16));
#endif
}

MINFER_HD float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
#if defined(__CUDA_ARCH__)
  f = __uint_as_float(bits);
#else
  std::memcpy(&f, &bits, 4);
#endif
  return f;
}

// ---- legacy 32-value blocks -------------------------------------------------------------

template <class Put>
MINFER_HD void decode_block(const minfer_block_q4_0 &b, Put &&put) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < MINFER_QK / 2; ++j) {
    put(j, d * float(int(b.qs[j] & 0x0f) - 8));
    put(j + MINFER_QK / 2, d * float(int(b.qs[j] >> 4) - 8));
  }
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q4_1 &b, Put &&put) {
  const float d = half_to_float(b.d), m = half_to_float(b.m);
  for (int j = 0; j < MINFER_QK / 2; ++j) {
    put(j, d * float(b.qs[j] & 0x0f) + m);
    put(j + MINFER_QK / 2, d * float(b.qs[j] >> 4) + m);
  }
}

MINFER_HD uint32_t load_qh(const uint8_t qh[4]) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q5_0 &b, Put &&put) {
  const float d = half_to_float(b.d);
  const uint32_t qh = load_qh(b.qh);
  for (int j = 0; j < MINFER_QK / 2; ++j) {
    const int lo = int(b.qs[j] & 0x0f) | int((qh >> j) & 1u) << 4;
    const int hi = int(b.qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
    put(j, d * float(lo - 16));
    put(j + MINFER_QK / 2, d * float(hi - 16));
  }
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q5_1 &b, Put &&put) {
  const float d = half_to_float(b.d), m = half_to_float(b.m);
  const uint32_t qh = load_qh(b.qh);
  for (int j = 0; j < MINFER_QK / 2; ++j) {
    const int lo = int(b.qs[j] & 0x0f) | int((qh >> j) & 1u) << 4;
    const int hi = int(b.qs[j] >> 4) | int((qh >> (j + 16)) & 1u) << 4;
    put(j, d * float(lo) + m);
    put(j + MINFER_QK / 2, d * float(hi) + m);
  }
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q8_0 &b, Put &&put) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < MINFER_QK; ++j) put(j, d * float(b.qs[j]));
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q8_1 &b, Put &&put) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < MINFER_QK; ++j) put(j, d * float(b.qs[j]));
}

// ---- K-quants: 256-value super-blocks ---------------------------------------------------

template <class Put>
MINFER_HD void decode_block(const minfer_block_q2_k &b, Put &&put) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  // Two halves of 128; each byte of a 32-byte run holds one 2-bit value of 4 sub-blocks.
  for (int half = 0; half < 2; ++half) {
    const uint8_t *q = b.qs + 32 * half;
    for (int shift_i = 0; shift_i < 4; ++shift_i) {
      for (int part = 0; part < 2; ++part) {
        const uint8_t sc = b.scales[8 * half + 2 * shift_i + part];
        const float dl = d * float(sc & 0x0f), ml = dmin * float(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          const int q2 = (q[16 * part + l] >> (2 * shift_i)) & 3;
          put(128 * half + 32 * shift_i + 16 * part + l, dl * float(q2) - ml);
        }
      }
    }
  }
}

// Q3_K's 16 six-bit scales: low 4 bits in bytes 0..7 (nibbles), high 2 bits in bytes 8..11.
MINFER_HD int q3_k_scale(const uint8_t *scales, int s) {
  const int lo = s < 8 ? (scales[s] & 0x0f) : (scales[s - 8] >> 4);
  const int hi = (scales[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
  return (lo | hi << 4) - 32;
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q3_k &b, Put &&put) {
  const float d = half_to_float(b.d);
  for (int half = 0; half < 2; ++half) {
    const uint8_t *q = b.qs + 32 * half;
    for (int shift_i = 0; shift_i < 4; ++shift_i) {
      const uint8_t hbit = uint8_t(1u << (4 * half + shift_i));
      for (int part = 0; part < 2; ++part) {
        const float dl = d * float(q3_k_scale(b.scales, 8 * half + 2 * shift_i + part));
        for (int l = 0; l < 16; ++l) {
          const int idx = 16 * part + l;
          const int q3 = ((q[idx] >> (2 * shift_i)) & 3) - ((b.hmask[idx] & hbit) ? 0 : 4);
          put(128 * half + 32 * shift_i + idx, dl * float(q3));
        }
      }
    }
  }
}

// Q4_K/Q5_K: 8 (scale, min) pairs of 6 bits packed in 12 bytes.
MINFER_HD void k4_scale_min(const uint8_t *q, int j, int &sc, int &m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q4_k &b, Put &&put) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  for (int g = 0; g < 4; ++g) {  // 64 values per group: low nibbles then high nibbles
    int sc0, m0, sc1, m1;
    k4_scale_min(b.scales, 2 * g, sc0, m0);
    k4_scale_min(b.scales, 2 * g + 1, sc1, m1);
    const uint8_t *q = b.qs + 32 * g;
    for (int l = 0; l < 32; ++l) {
      put(64 * g + l, d * float(sc0) * float(q[l] & 0x0f) - dmin * float(m0));
      put(64 * g + 32 + l, d * float(sc1) * float(q[l] >> 4) - dmin * float(m1));
    }
  }
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q5_k &b, Put &&put) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  for (int g = 0; g < 4; ++g) {
    int sc0, m0, sc1, m1;
    k4_scale_min(b.scales, 2 * g, sc0, m0);
    k4_scale_min(b.scales, 2 * g + 1, sc1, m1);
    const uint8_t *q = b.qs + 32 * g;
    for (int l = 0; l < 32; ++l) {
      const int lo = (q[l] & 0x0f) | ((b.qh[l] >> (2 * g)) & 1) << 4;
      const int hi = (q[l] >> 4) | ((b.qh[l] >> (2 * g + 1)) & 1) << 4;
      put(64 * g + l, d * float(sc0) * float(lo) - dmin * float(m0));
      put(64 * g + 32 + l, d * float(sc1) * float(hi) - dmin * float(m1));
    }
  }
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q6_k &b, Put &&put) {
  const float d = half_to_float(b.d);
  for (int half = 0; half < 2; ++half) {
    const uint8_t *ql = b.ql + 64 * half;
    const uint8_t *qh = b.qh + 32 * half;
    const int8_t *sc = b.scales + 8 * half;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
      const int q2 = int((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
      const int q3 = int((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      const int q4 = int((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
      put(128 * half + l, d * float(sc[is]) * float(q1));
      put(128 * half + 32 + l, d * float(sc[is + 2]) * float(q2));
      put(128 * half + 64 + l, d * float(sc[is + 4]) * float(q3));
      put(128 * half + 96 + l, d * float(sc[is + 6]) * float(q4));
    }
  }
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_q8_k &b, Put &&put) {
  for (int j = 0; j < MINFER_QK_K; ++j) put(j, b.d * float(b.qs[j]));
}

// ---- non-linear 4-bit blocks (a 16-value table, blocks.h) ------------------------------

// IQ4_NL's value of 4-bit index q (0..15).
MINFER_HD int iq4_value(int q) {
  const uint64_t t = q < 8 ? MINFER_IQ4_VALUES_LO : MINFER_IQ4_VALUES_HI;
  return int(int8_t(uint8_t(t >> (8 * (q & 7)))));
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_iq4_nl &b, Put &&put) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < MINFER_QK / 2; ++j) {
    put(j, d * float(iq4_value(b.qs[j] & 0x0f)));
    put(j + MINFER_QK / 2, d * float(iq4_value(b.qs[j] >> 4)));
  }
}

// IQ4_XS sub-block j's signed 6-bit scale.
MINFER_HD int iq4_xs_scale(const minfer_block_iq4_xs &b, int j) {
  return (((b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) | ((b.scales_h >> (2 * j)) & 3) << 4) - 32;
}

template <class Put>
MINFER_HD void decode_block(const minfer_block_iq4_xs &b, Put &&put) {
  const float d = half_to_float(b.d);
  for (int j = 0; j < MINFER_QK_K / 32; ++j) {
    const float dl = d * float(iq4_xs_scale(b, j));
    const uint8_t *q = b.qs + 16 * j;
    for (int l = 0; l < 16; ++l) {
      put(32 * j + l, dl * float(iq4_value(q[l] & 0x0f)));
      put(32 * j + 16 + l, dl * float(iq4_value(q[l] >> 4)));
    }
  }
}

// ---- dtype -> block struct, for code that dispatches on a run-time dtype ----------------

template <int32_t DType> struct BlockOf;
template <> struct BlockOf<MINFER_DTYPE_Q4_0> { using type = minfer_block_q4_0; };
template <> struct BlockOf<MINFER_DTYPE_Q4_1> { using type = minfer_block_q4_1; };
template <> struct BlockOf<MINFER_DTYPE_Q5_0> { using type = minfer_block_q5_0; };
template <> struct BlockOf<MINFER_DTYPE_Q5_1> { using type = minfer_block_q5_1; };
template <> struct BlockOf<MINFER_DTYPE_Q8_0> { using type = minfer_block_q8_0; };
template <> struct BlockOf<MINFER_DTYPE_Q8_1> { using type = minfer_block_q8_1; };
template <> struct BlockOf<MINFER_DTYPE_Q2_K> { using type = minfer_block_q2_k; };
template <> struct BlockOf<MINFER_DTYPE_Q3_K> { using type = minfer_block_q3_k; };
template <> struct BlockOf<MINFER_DTYPE_Q4_K> { using type = minfer_block_q4_k; };
template <> struct BlockOf<MINFER_DTYPE_Q5_K> { using type = minfer_block_q5_k; };
template <> struct BlockOf<MINFER_DTYPE_Q6_K> { using type = minfer_block_q6_k; };
template <> struct BlockOf<MINFER_DTYPE_Q8_K> { using type = minfer_block_q8_k; };
template <> struct BlockOf<MINFER_DTYPE_IQ4_NL> { using type = minfer_block_iq4_nl; };
template <> struct BlockOf<MINFER_DTYPE_IQ4_XS> { using type = minfer_block_iq4_xs; };

template <class Block> struct BlockTag { using type = Block; };

// Calls f(BlockTag<block struct>{}) for a block dtype and returns true; false for any other
// dtype, so callers report "unsupported" instead of aborting.
template <class F>
inline bool visit_block_dtype(int32_t dtype, F &&f) {
  switch (dtype) {
#define MINFER_VISIT_(T) \
  case T: f(BlockTag<typename BlockOf<T>::type>{}); return true;
    MINFER_VISIT_(MINFER_DTYPE_Q4_0)
    MINFER_VISIT_(MINFER_DTYPE_Q4_1)
    MINFER_VISIT_(MINFER_DTYPE_Q5_0)
    MINFER_VISIT_(MINFER_DTYPE_Q5_1)
    MINFER_VISIT_(MINFER_DTYPE_Q8_0)
    MINFER_VISIT_(MINFER_DTYPE_Q8_1)
    MINFER_VISIT_(MINFER_DTYPE_Q2_K)
    MINFER_VISIT_(MINFER_DTYPE_Q3_K)
    MINFER_VISIT_(MINFER_DTYPE_Q4_K)
    MINFER_VISIT_(MINFER_DTYPE_Q5_K)
    MINFER_VISIT_(MINFER_DTYPE_Q6_K)
    MINFER_VISIT_(MINFER_DTYPE_Q8_K)
    MINFER_VISIT_(MINFER_DTYPE_IQ4_NL)
    MINFER_VISIT_(MINFER_DTYPE_IQ4_XS)
#undef MINFER_VISIT_
    default: return false;
  }
}

}  // namespace minfer::sdk
