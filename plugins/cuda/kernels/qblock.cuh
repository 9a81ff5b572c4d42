// plugins/cuda/kernels/qblock.cuh — weight blocks as the integer matmuls read them: 32 values
// at a time ("sub-blocks", the size of one quantized-activation block), as 8 words of int8.
//
// Every supported type reduces to   value[i] = d[i / 16] * q[i] + m   for i in 0..31:
// one scale for the 32 values (two for Q6_K and Q3_K, whose scales cover 16 values each) and
// an offset m for the types that store a minimum (Q4_1, Q5_1, Q4_K, Q5_K). A dot product with
// activations a = da * qa then costs dp4a over the words, the scales, and m * sum(a), the
// activations' sum that minfer_cuda_q8_act keeps. Q2_K's minima cover 16 values too
// (kTwoOffsets: m for values 0..15, m2 for 16..31): its dot sums each half of qa itself,
// which the GEMVs do (int8_dot.cuh) and MMQ, reading only the blocks' sums, does not. The GEMVs (gemv.cu, mmvq.cu) and the tensor-core GEMM
// (mmq.cu) share these, so a block layout is spelled out once for the device's integer paths.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "minfer/blocks.h"
#include "minfer/decode.hpp"

namespace minfer::cuda {

struct SubBlock {
  uint32_t q[8];  // values 4w..4w+3 in word w, as signed bytes
  float d[2];     // scale of values 0..15 and of 16..31 (equal unless kTwoScales)
  float m;        // offset (0 unless kOffset; of values 0..15 where kTwoOffsets)
  float m2;       // offset of values 16..31 (read only where kTwoOffsets)
};

__device__ __forceinline__ float f16_bits(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// 4 bytes at a 2-byte aligned address (the 18-, 22- and 34-byte blocks and Q6_K's 210).
__device__ __forceinline__ uint32_t load_u32_a2(const uint8_t *p) {
  const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
  return uint32_t(h[0]) | uint32_t(h[1]) << 16;
}
__device__ __forceinline__ uint32_t load_u32(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }

// How an unpack reads a 4-byte word of quants. WordsA2: at any even address (two 16-bit loads
// and a merge). In a run of blocks whose size is 2 mod 4 (Q4_0's 18 bytes, Q8_0's 34, Q6_K's
// 210), every other block has its words on 4 bytes: WordsAt<0> reads those as they are, and
// WordsAt<2> the others (2 past a boundary) as a byte permute of the aligned words either side,
// so a block's consecutive words share their loads (five 4-byte loads for 16 bytes, not eight
// 2-byte ones) and the last reads up to 2 bytes past the run.
struct WordsA2 {
  __device__ static uint32_t at(const uint8_t *p) { return load_u32_a2(p); }
};
template <int kMod4>
struct WordsAt;
template <>
struct WordsAt<0> {
  __device__ static uint32_t at(const uint8_t *p) { return load_u32(p); }
};
template <>
struct WordsAt<2> {
  __device__ static uint32_t at(const uint8_t *p) { return __byte_perm(load_u32(p - 2), load_u32(p + 2), 0x5432); }
};

// Bytes v - bias for bytes v < 128 and bias <= 128, as signed bytes: each byte is lifted by 128
// first, so the subtraction never borrows across bytes (three instructions; __vsub4 takes more).
__device__ __forceinline__ uint32_t sub_bias4(uint32_t v, uint32_t bias) { return ((v | 0x80808080u) - bias) ^ 0x80808080u; }

// Q6_K's 6-bit quants q (0..63) as signed bytes 4 (q - 32): each byte's nibble at bits 2..5
// (nib2: a word holding them there) and its two high bits at 6..7 (hi6), i.e. q << 2, with the
// top bit flipped, which reads as the signed 6-bit q ^ 32 = q - 32 times 4: two logic
// operations a word after the shifts that place the fields, where q - 32 took a subtraction and
// three more. The block's scales take the 1/4 (a power of two: every product is bit for bit
// what q - 32 with the whole scale gives).
__device__ __forceinline__ uint32_t q6_times4(uint32_t nib2, uint32_t hi6) { return ((nib2 & 0x3c3c3c3cu) | (hi6 & 0xc0c0c0c0u)) ^ 0x80808080u; }

// Bits 0..3 of b to bit 4 of bytes 0..3 (a 5-bit type's high bits).
__device__ __forceinline__ uint32_t high_bits4(uint32_t b) { return ((b & 0xfu) * 0x00204081u & 0x01010101u) << 4; }

template <class Block> struct QBlock;

template <> struct QBlock<minfer_block_q4_0> {
  static constexpr int kSubs = 1;
  static constexpr bool kTwoScales = false, kOffset = false;
  __device__ static void unpack(const minfer_block_q4_0 &b, int, SubBlock &s) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = load_u32_a2(b.qs + 4 * i);
      s.q[i] = sub_bias4(w & 0x0f0f0f0fu, 0x08080808u);             // values 4i..: low nibbles
      s.q[i + 4] = sub_bias4((w >> 4) & 0x0f0f0f0fu, 0x08080808u);  // values 16 + 4i..: high nibbles
    }
    s.d[0] = s.d[1] = f16_bits(b.d);
    s.m = 0;
  }
};

template <> struct QBlock<minfer_block_q4_1> {
  static constexpr int kSubs = 1;
  static constexpr bool kTwoScales = false, kOffset = true;
  __device__ static void unpack(const minfer_block_q4_1 &b, int, SubBlock &s) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = load_u32(b.qs + 4 * i);
      s.q[i] = w & 0x0f0f0f0fu;
      s.q[i + 4] = (w >> 4) & 0x0f0f0f0fu;
    }
    s.d[0] = s.d[1] = f16_bits(b.d);
    s.m = f16_bits(b.m);
  }
};

template <> struct QBlock<minfer_block_q5_0> {
  static constexpr int kSubs = 1;
  static constexpr bool kTwoScales = false, kOffset = false;
  __device__ static void unpack(const minfer_block_q5_0 &b, int, SubBlock &s) {
    const uint32_t qh = load_u32_a2(b.qh);  // bit i: the high bit of value i
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = load_u32_a2(b.qs + 4 * i);
      s.q[i] = sub_bias4((w & 0x0f0f0f0fu) | high_bits4(qh >> (4 * i)), 0x10101010u);
      s.q[i + 4] = sub_bias4(((w >> 4) & 0x0f0f0f0fu) | high_bits4(qh >> (16 + 4 * i)), 0x10101010u);
    }
    s.d[0] = s.d[1] = f16_bits(b.d);
    s.m = 0;
  }
};

template <> struct QBlock<minfer_block_q5_1> {
  static constexpr int kSubs = 1;
  static constexpr bool kTwoScales = false, kOffset = true;
  __device__ static void unpack(const minfer_block_q5_1 &b, int, SubBlock &s) {
    const uint32_t qh = load_u32(b.qh);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = load_u32(b.qs + 4 * i);
      s.q[i] = (w & 0x0f0f0f0fu) | high_bits4(qh >> (4 * i));
      s.q[i + 4] = ((w >> 4) & 0x0f0f0f0fu) | high_bits4(qh >> (16 + 4 * i));
    }
    s.d[0] = s.d[1] = f16_bits(b.d);
    s.m = f16_bits(b.m);
  }
};

template <> struct QBlock<minfer_block_q8_0> {
  static constexpr int kSubs = 1;
  static constexpr bool kTwoScales = false, kOffset = false;
  template <class W = WordsA2>
  __device__ static void unpack(const minfer_block_q8_0 &b, int, SubBlock &s) {
    const uint8_t *qs = reinterpret_cast<const uint8_t *>(b.qs);
#pragma unroll
    for (int i = 0; i < 8; ++i) s.q[i] = W::at(qs + 4 * i);
    s.d[0] = s.d[1] = f16_bits(b.d);
    s.m = 0;
  }
};

// Q4_K and Q5_K: sub-blocks 2g and 2g+1 are the low and high nibbles of the same 32 bytes, with
// 6-bit scales and minima (k4_scale_min); Q5_K adds bit j of each of its 32 qh bytes as the
// values' fifth bit. kAligned16: the block starts on 16 bytes (its qs and qh then do too:
// 144 and 176 bytes, at offsets 16 and 16/48), so 32 bytes are two 16-byte loads, not eight
// 4-byte ones: from shared memory eight lanes on one block's sub-blocks read one row of banks
// each quarter-warp, where the 4-byte loads of a warp's four blocks (36 words apart) meet two
// to a bank.
__device__ __forceinline__ void load_words(const uint8_t *p, uint32_t (&w)[8]) {
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = load_u32(p + 4 * i);
}
__device__ __forceinline__ void load_words16(const uint8_t *p, uint32_t (&w)[8]) {
  const uint4 a = reinterpret_cast<const uint4 *>(p)[0], b = reinterpret_cast<const uint4 *>(p)[1];
  w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
// Sub-block j's 6-bit scale and minimum (k4_scale_min) from a Q4_K / Q5_K block's first 16
// bytes as one 16-byte load: d and dmin, then the 12 scale bytes (byte j and j + 4 for j < 4,
// else the nibbles of byte j + 4 with the top bits of bytes j - 4 and j), one select a field.
__device__ __forceinline__ void k4_scale_min16(const uint4 &head, int j, int &sc, int &m) {
  const int sh = 8 * (j & 3);
  const uint32_t a = (head.y >> sh) & 0xffu, b = (head.z >> sh) & 0xffu, c = (head.w >> sh) & 0xffu;
  sc = j < 4 ? int(a & 63u) : int((c & 0x0fu) | (a >> 6) << 4);
  m = j < 4 ? int(b & 63u) : int((c >> 4) | (b >> 6) << 4);
}

template <bool kAligned16, class Block>
__device__ __forceinline__ void unpack_k4(const Block &b, int j, const uint8_t *qh, SubBlock &s) {
  const uint8_t *qs = b.qs + 32 * (j >> 1);
  const int shift = 4 * (j & 1);
  uint32_t wq[8], wh[8];
  if (kAligned16) load_words16(qs, wq);
  else load_words(qs, wq);
  if (qh && kAligned16) load_words16(qh, wh);
  else if (qh) load_words(qh, wh);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    s.q[i] = (wq[i] >> shift) & 0x0f0f0f0fu;
    if (qh) s.q[i] |= ((wh[i] >> j) & 0x01010101u) << 4;
  }
  int sc, m;
  if constexpr (kAligned16) {  // the block's head in one load, not four to six small ones
    const uint4 head = *reinterpret_cast<const uint4 *>(&b);
    k4_scale_min16(head, j, sc, m);
    s.d[0] = s.d[1] = f16_bits(uint16_t(head.x & 0xffffu)) * float(sc);
    s.m = -f16_bits(uint16_t(head.x >> 16)) * float(m);
    return;
  }
  minfer::sdk::k4_scale_min(b.scales, j, sc, m);
  s.d[0] = s.d[1] = f16_bits(b.d) * float(sc);
  s.m = -f16_bits(b.dmin) * float(m);
}

template <> struct QBlock<minfer_block_q4_k> {
  static constexpr int kSubs = 8;
  static constexpr bool kTwoScales = false, kOffset = true;
  __device__ static void unpack(const minfer_block_q4_k &b, int j, SubBlock &s) { unpack_k4<false>(b, j, nullptr, s); }
  __device__ static void unpack16(const minfer_block_q4_k &b, int j, SubBlock &s) { unpack_k4<true>(b, j, nullptr, s); }
};

template <> struct QBlock<minfer_block_q5_k> {
  static constexpr int kSubs = 8;
  static constexpr bool kTwoScales = false, kOffset = true;
  __device__ static void unpack(const minfer_block_q5_k &b, int j, SubBlock &s) { unpack_k4<false>(b, j, b.qh, s); }
  __device__ static void unpack16(const minfer_block_q5_k &b, int j, SubBlock &s) { unpack_k4<true>(b, j, b.qh, s); }
};

// Q6_K: 128-value halves; in half h, sub-block g takes ql bytes 32 * (g & 1).. (low or high
// nibbles for g < 2 or not) and bits 2g, 2g+1 of the half's 32 qh bytes; scales per 16 values.
template <> struct QBlock<minfer_block_q6_k> {
  static constexpr int kSubs = 8;
  static constexpr bool kTwoScales = true, kOffset = false;
  template <class W = WordsA2>
  __device__ static void unpack(const minfer_block_q6_k &b, int j, SubBlock &s) {
    const int h = j >> 2, g = j & 3;
    const uint8_t *ql = b.ql + 64 * h + 32 * (g & 1), *qh = b.qh + 32 * h;
    // As 4 (q - 32) (q6_times4): the nibble at bit 0 (g < 2) or 4 of each byte to bit 2, the two
    // bits at 2g to bit 6. (A rotate for the nibble, one instruction for both cases, made the
    // Q4_K + Q6_K GEMV spill at its 80 registers.)
    const unsigned shl_h = 6 - 2 * g;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t l = W::at(ql + 4 * i);
      s.q[i] = q6_times4(g & 2 ? l >> 2 : l << 2, W::at(qh + 4 * i) << shl_h);
    }
    const float d = f16_bits(b.d) * 0.25f;
    s.d[0] = d * float(b.scales[8 * h + 2 * g]);
    s.d[1] = d * float(b.scales[8 * h + 2 * g + 1]);
    s.m = 0;
  }
};

// IQ4_NL and IQ4_XS: 4-bit indices into blocks.h's 16 signed values. Four indices (one a
// byte, 0..15) to their values: two byte permutes pick each index's value among the table's
// first eight and its last eight, and bit 3 of the index chooses between the two.
__device__ __forceinline__ uint32_t iq4_values4(uint32_t idx) {
  constexpr uint32_t t0 = uint32_t(MINFER_IQ4_VALUES_LO), t1 = uint32_t(MINFER_IQ4_VALUES_LO >> 32);
  constexpr uint32_t t2 = uint32_t(MINFER_IQ4_VALUES_HI), t3 = uint32_t(MINFER_IQ4_VALUES_HI >> 32);
  const uint32_t v = idx & 0x07070707u, both = v | v >> 4;
  const uint32_t sel = (both & 0xffu) | ((both >> 8) & 0xff00u);  // index i's low 3 bits at bits 4i..4i+2
  const uint32_t lo = __byte_perm(t0, t1, sel), hi = __byte_perm(t2, t3, sel);
  const uint32_t upper = ((idx >> 3) & 0x01010101u) * 0xffu;
  return (hi & upper) | (lo & ~upper);
}
__device__ __forceinline__ void unpack_iq4_16(const uint8_t *qs, bool aligned4, SubBlock &s) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = aligned4 ? load_u32(qs + 4 * i) : load_u32_a2(qs + 4 * i);
    s.q[i] = iq4_values4(w & 0x0f0f0f0fu);             // values 4i..: low nibbles
    s.q[i + 4] = iq4_values4((w >> 4) & 0x0f0f0f0fu);  // values 16 + 4i..: high nibbles
  }
}

template <> struct QBlock<minfer_block_iq4_nl> {
  static constexpr int kSubs = 1;
  static constexpr bool kTwoScales = false, kOffset = false;
  __device__ static void unpack(const minfer_block_iq4_nl &b, int, SubBlock &s) {
    unpack_iq4_16(b.qs, false, s);  // 18-byte blocks: qs on 2 bytes
    s.d[0] = s.d[1] = f16_bits(b.d);
    s.m = 0;
  }
};

template <> struct QBlock<minfer_block_iq4_xs> {
  static constexpr int kSubs = 8;
  static constexpr bool kTwoScales = false, kOffset = false;
  __device__ static void unpack(const minfer_block_iq4_xs &b, int j, SubBlock &s) {
    unpack_iq4_16(b.qs + 16 * j, true, s);  // 136-byte blocks: qs (offset 8) on 4 bytes
    s.d[0] = s.d[1] = f16_bits(b.d) * float(minfer::sdk::iq4_xs_scale(b, j));
    s.m = 0;
  }
};

// Sub-block pairs: the two sub-blocks of a K-quant block that share their quantized bytes,
// as one lane's piece of work, so that each byte is read once and in 16-byte loads (unpack
// reads a sub-block's bytes again for its twin, Q6_K's two at a time: a warp of lanes on those
// small loads kept the expert kernels' load queue full). Pair p (0..3) of a block holds
// sub-blocks first(p) and first(p) + kSecond; load() issues the loads, unpack() makes both.
template <class Block> struct SubPair;
template <class Block>
constexpr bool kSubPairs = false;

// Q4_K (on 16 bytes): sub-blocks 2p and 2p + 1, the low and high nibbles of the same 32 qs
// bytes; d, dmin and the 12 scale bytes are the block's first 16 (k4_scale_min's bytes
// j and j + 4 for j < 4, else the nibbles of byte j + 4 with the top bits of bytes j - 4 and j).
template <> struct SubPair<minfer_block_q4_k> {
  static constexpr int kSecond = 1;
  __device__ static int first(int p) { return 2 * p; }
  struct Raw {
    uint4 head, q[2];
  };
  __device__ static void load(const minfer_block_q4_k *b, int p, Raw &r) {
    r.head = *reinterpret_cast<const uint4 *>(b);
    const uint4 *q = reinterpret_cast<const uint4 *>(b->qs + 32 * p);
    r.q[0] = q[0], r.q[1] = q[1];
  }
  __device__ static void unpack(const Raw &r, int p, SubBlock &lo, SubBlock &hi) {
    const uint32_t w[8] = {r.q[0].x, r.q[0].y, r.q[0].z, r.q[0].w, r.q[1].x, r.q[1].y, r.q[1].z, r.q[1].w};
#pragma unroll
    for (int i = 0; i < 8; ++i) lo.q[i] = w[i] & 0x0f0f0f0fu, hi.q[i] = (w[i] >> 4) & 0x0f0f0f0fu;
    const float d = f16_bits(uint16_t(r.head.x & 0xffffu)), dmin = f16_bits(uint16_t(r.head.x >> 16));
    int sc, m;
    k4_scale_min16(r.head, 2 * p, sc, m);
    lo.d[0] = lo.d[1] = d * float(sc), lo.m = -dmin * float(m);
    k4_scale_min16(r.head, 2 * p + 1, sc, m);
    hi.d[0] = hi.d[1] = d * float(sc), hi.m = -dmin * float(m);
  }
};
template <>
constexpr bool kSubPairs<minfer_block_q4_k> = true;

// Q6_K: sub-blocks g and g + 2 of half h (p = 2h + g, g < 2) take the same 32 ql bytes (low
// and high nibbles) and the half's 32 qh bytes. The 210-byte blocks start on any even
// address: each 32 bytes come from the 48 aligned bytes around them (never outside the block
// when the weights start on 16 bytes: the last qh byte read is its 208th), shifted into place
// by the block's offset from 16 bytes.
template <> struct SubPair<minfer_block_q6_k> {
  static constexpr int kSecond = 2;
  __device__ static int first(int p) { return 4 * (p >> 1) + (p & 1); }
  struct Raw {
    uint4 ql[3], qh[3];
    uint32_t sc_lo, sc_hi;  // scale bytes 8h + 2g, +1 (sub-block g) and 8h + 2g + 4, +5 (g + 2)
    uint32_t d;             // the block's f16 scale
    int off;                // the block's address mod 16 (even)
  };
  __device__ static void load(const minfer_block_q6_k *b, int p, Raw &r) {
    const int h = p >> 1, g = p & 1;
    const uintptr_t at = reinterpret_cast<uintptr_t>(b);
    r.off = int(at & 15u);
    const uint4 *ql = reinterpret_cast<const uint4 *>((at + 64 * h + 32 * g) & ~uintptr_t(15));
    const uint4 *qh = reinterpret_cast<const uint4 *>((at + 128 + 32 * h) & ~uintptr_t(15));
#pragma unroll
    for (int i = 0; i < 3; ++i) r.ql[i] = ql[i], r.qh[i] = qh[i];
    const uint16_t *sc = reinterpret_cast<const uint16_t *>(b->scales + 8 * h + 2 * g);
    r.sc_lo = sc[0], r.sc_hi = sc[2], r.d = b->d;
  }
  // The 32 bytes at byte `off` (even, < 16) of three 16-byte pieces, as 8 words: two selects
  // drop the whole words before them, a funnel shift the half word.
  __device__ static void words_at(const uint4 (&v)[3], int off, uint32_t (&w)[8]) {
    const uint32_t x[12] = {v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w, v[2].x, v[2].y, v[2].z, v[2].w};
    const int q = off >> 2;
    const uint32_t sh = uint32_t(off & 3) * 8;
    uint32_t a[11], c[9];
#pragma unroll
    for (int k = 0; k < 11; ++k) a[k] = q & 1 ? x[k + 1] : x[k];
#pragma unroll
    for (int k = 0; k < 9; ++k) c[k] = q & 2 ? a[k + 2] : a[k];
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = __funnelshift_r(c[i], c[i + 1], sh);
  }
  __device__ static void unpack(const Raw &r, int p, SubBlock &lo, SubBlock &hi) {
    uint32_t wl[8], wh[8];
    words_at(r.ql, r.off, wl);
    words_at(r.qh, r.off, wh);
    const int sh = 2 * (p & 1);  // sub-block g's two bits at 2g, g + 2's at 2g + 4 (q6_times4's form)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      lo.q[i] = q6_times4(wl[i] << 2, wh[i] << (6 - sh));
      hi.q[i] = q6_times4(wl[i] >> 2, wh[i] << (2 - sh));
    }
    const float d = f16_bits(uint16_t(r.d)) * 0.25f;
    lo.d[0] = d * float(int8_t(r.sc_lo & 0xffu)), lo.d[1] = d * float(int8_t(r.sc_lo >> 8));
    hi.d[0] = d * float(int8_t(r.sc_hi & 0xffu)), hi.d[1] = d * float(int8_t(r.sc_hi >> 8));
    lo.m = hi.m = 0;
  }
};
template <>
constexpr bool kSubPairs<minfer_block_q6_k> = true;

// Q2_K and Q3_K: sub-block j takes the 2-bit fields at bit 2 (j % 4) of the 32 qs bytes
// 32 (j / 4).., scales (and Q2_K's minima) per 16 values. Q3_K adds bit j of its 32 hmask
// bytes as the third bit, the values 0..7 less 4; Q2_K's values are 0..3.
__device__ __forceinline__ uint32_t k2_crumbs(const uint8_t *qs, int j, int i) {
  return (load_u32_a2(qs + 32 * (j >> 2) + 4 * i) >> (2 * (j & 3))) & 0x03030303u;
}

template <> struct QBlock<minfer_block_q2_k> {
  static constexpr int kSubs = 8;
  static constexpr bool kTwoScales = true, kOffset = false;  // and kTwoOffsets below
  __device__ static void unpack(const minfer_block_q2_k &b, int j, SubBlock &s) {
#pragma unroll
    for (int i = 0; i < 8; ++i) s.q[i] = k2_crumbs(b.qs, j, i);
    const float d = f16_bits(b.d), dmin = f16_bits(b.dmin);
    const uint8_t sc0 = b.scales[2 * j], sc1 = b.scales[2 * j + 1];
    s.d[0] = d * float(sc0 & 0x0f), s.d[1] = d * float(sc1 & 0x0f);
    s.m = -dmin * float(sc0 >> 4), s.m2 = -dmin * float(sc1 >> 4);
  }
};

template <> struct QBlock<minfer_block_q3_k> {
  static constexpr int kSubs = 8;
  static constexpr bool kTwoScales = true, kOffset = false;
  __device__ static void unpack(const minfer_block_q3_k &b, int j, SubBlock &s) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t hi = (load_u32_a2(b.hmask + 4 * i) >> j) & 0x01010101u;
      s.q[i] = sub_bias4(k2_crumbs(b.qs, j, i) | hi << 2, 0x04040404u);
    }
    const float d = f16_bits(b.d);
    s.d[0] = d * float(minfer::sdk::q3_k_scale(b.scales, 2 * j));
    s.d[1] = d * float(minfer::sdk::q3_k_scale(b.scales, 2 * j + 1));
    s.m = 0;
  }
};

// The one-token GEMVs' unpacking (gemv.cu): Q4_0's and Q5_0's quants as they are stored
// (0..15, 0..31), their bias (kBias: 8, 16) taken off once a block by gemv_dot (-bias * d_w *
// s_x, s_x = d_x * sum(q_x)) instead of three instructions a word (Q4_0's GEMV loop is bound
// by instruction issue); MMQ keeps QBlock::unpack's signed bytes. The same dot up to float
// rounding.
template <class Block>
struct GemvUnpack {
  static constexpr float kBias = 0;
  __device__ static void unpack(const Block &b, int j, SubBlock &s) { QBlock<Block>::unpack(b, j, s); }
};
template <>
struct GemvUnpack<minfer_block_q4_0> {
  static constexpr float kBias = 8;
  template <class W = WordsA2>
  __device__ static void unpack(const minfer_block_q4_0 &b, int, SubBlock &s) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = W::at(b.qs + 4 * i);
      s.q[i] = w & 0x0f0f0f0fu, s.q[i + 4] = (w >> 4) & 0x0f0f0f0fu;
    }
    s.d[0] = s.d[1] = f16_bits(b.d);
    s.m = 0;
  }
};
template <>
struct GemvUnpack<minfer_block_q5_0> {
  static constexpr float kBias = 16;
  __device__ static void unpack(const minfer_block_q5_0 &b, int, SubBlock &s) {
    const uint32_t qh = load_u32_a2(b.qh);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = load_u32_a2(b.qs + 4 * i);
      s.q[i] = (w & 0x0f0f0f0fu) | high_bits4(qh >> (4 * i));
      s.q[i + 4] = ((w >> 4) & 0x0f0f0f0fu) | high_bits4(qh >> (16 + 4 * i));
    }
    s.d[0] = s.d[1] = f16_bits(b.d);
    s.m = 0;
  }
};

// The types whose one-token unpacking takes a word reader (WordsAt): blocks of a size 2 mod 4,
// and where their quants' words lie in a block, mod 4 (-1: not such a type).
template <class Block>
constexpr int kWordsMod4 = -1;
template <>
constexpr int kWordsMod4<minfer_block_q4_0> = 2;  // qs after the 2-byte d
template <>
constexpr int kWordsMod4<minfer_block_q8_0> = 2;
template <>
constexpr int kWordsMod4<minfer_block_q6_k> = 0;  // ql and qh at 0 and 128
template <class Block, class W>
__device__ __forceinline__ void gemv_unpack_words(const Block &b, int j, SubBlock &s) {
  static_assert(kWordsMod4<Block> >= 0 && sizeof(Block) % 4 == 2, "a type whose blocks alternate in alignment");
  if constexpr (std::is_same_v<Block, minfer_block_q4_0>) GemvUnpack<Block>::template unpack<W>(b, j, s);
  else QBlock<Block>::template unpack<W>(b, j, s);
}

// Whether a type has unpack16, QBlock::unpack for a block that starts on 16 bytes.
template <class Block>
constexpr bool kUnpack16 = false;
template <>
constexpr bool kUnpack16<minfer_block_q4_k> = true;
template <>
constexpr bool kUnpack16<minfer_block_q5_k> = true;

// Whether a type's minima cover 16 values (Q2_K), so a dot needs each half's activation sum.
template <class Block>
constexpr bool kTwoOffsets = false;
template <>
constexpr bool kTwoOffsets<minfer_block_q2_k> = true;

// The sub-block `sb` (counting 32-value sub-blocks along a row that starts at `row`); kWide:
// the row starts on 16 bytes, read with unpack16 where the type has it.
template <class Block, bool kWide = false>
__device__ __forceinline__ void unpack_sub(const Block *row, int64_t sb, SubBlock &s) {
  constexpr int n = QBlock<Block>::kSubs;
  if constexpr (kWide && kUnpack16<Block>) QBlock<Block>::unpack16(row[sb / n], int(sb % n), s);
  else QBlock<Block>::unpack(row[sb / n], int(sb % n), s);
}

template <class Block>
__device__ __forceinline__ void gemv_unpack_sub(const Block *row, int64_t sb, SubBlock &s) {
  constexpr int n = QBlock<Block>::kSubs;
  GemvUnpack<Block>::unpack(row[sb / n], int(sb % n), s);
}

// Calls f(Block{}) for the types above; returns false for any other dtype.
template <class F>
bool visit_int8_block(int32_t dtype, F &&f) {
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: f(minfer_block_q4_0{}); return true;
    case MINFER_DTYPE_Q4_1: f(minfer_block_q4_1{}); return true;
    case MINFER_DTYPE_Q5_0: f(minfer_block_q5_0{}); return true;
    case MINFER_DTYPE_Q5_1: f(minfer_block_q5_1{}); return true;
    case MINFER_DTYPE_Q8_0: f(minfer_block_q8_0{}); return true;
    case MINFER_DTYPE_Q2_K: f(minfer_block_q2_k{}); return true;
    case MINFER_DTYPE_Q3_K: f(minfer_block_q3_k{}); return true;
    case MINFER_DTYPE_Q4_K: f(minfer_block_q4_k{}); return true;
    case MINFER_DTYPE_Q5_K: f(minfer_block_q5_k{}); return true;
    case MINFER_DTYPE_Q6_K: f(minfer_block_q6_k{}); return true;
    case MINFER_DTYPE_IQ4_NL: f(minfer_block_iq4_nl{}); return true;
    case MINFER_DTYPE_IQ4_XS: f(minfer_block_iq4_xs{}); return true;
    default: return false;
  }
}

}  // namespace minfer::cuda
