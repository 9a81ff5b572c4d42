#include "quant/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/parallel.hpp"
#include "minfer/blocks.h"
#include "minfer/decode.hpp"
#include "minfer/dtype.h"
#include "quant/reference.hpp"

namespace minfer::quant {
namespace {

uint16_t h(float x) { return f32_to_f16(x); }
int nearest(float x) { return int(std::lround(x)); }
int clampi(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

// The value of largest magnitude, keeping its sign (llama.cpp's legacy quantizers scale by it).
float signed_absmax(const float *x, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  return max;
}

void q4_0(const float *x, minfer_block_q4_0 &b) {
  const float d = signed_absmax(x, 32) / -8, id = d ? 1.0f / d : 0.0f;
  b.d = h(d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, int(int8_t(x[j] * id + 8.5f)));
    const int hi = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
    b.qs[j] = uint8_t(lo | hi << 4);
  }
}

void q4_1(const float *x, minfer_block_q4_1 &b) {
  const float mn = *std::min_element(x, x + 32), mx = *std::max_element(x, x + 32);
  const float d = (mx - mn) / 15, id = d ? 1.0f / d : 0.0f;
  b.d = h(d);
  b.m = h(mn);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, int(int8_t((x[j] - mn) * id + 0.5f)));
    const int hi = std::min(15, int(int8_t((x[j + 16] - mn) * id + 0.5f)));
    b.qs[j] = uint8_t(lo | hi << 4);
  }
}

void put_qh(uint8_t qh[4], uint32_t bits) {
  for (int i = 0; i < 4; ++i) qh[i] = uint8_t(bits >> (8 * i));
}

void q5_0(const float *x, minfer_block_q5_0 &b) {
  const float d = signed_absmax(x, 32) / -16, id = d ? 1.0f / d : 0.0f;
  b.d = h(d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(31, int(int8_t(x[j] * id + 16.5f)));
    const int hi = std::min(31, int(int8_t(x[j + 16] * id + 16.5f)));
    b.qs[j] = uint8_t((lo & 15) | (hi & 15) << 4);
    qh |= uint32_t(lo >> 4) << j | uint32_t(hi >> 4) << (j + 16);
  }
  put_qh(b.qh, qh);
}

void q5_1(const float *x, minfer_block_q5_1 &b) {
  const float mn = *std::min_element(x, x + 32), mx = *std::max_element(x, x + 32);
  const float d = (mx - mn) / 31, id = d ? 1.0f / d : 0.0f;
  b.d = h(d);
  b.m = h(mn);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(31, int(uint8_t((x[j] - mn) * id + 0.5f)));
    const int hi = std::min(31, int(uint8_t((x[j + 16] - mn) * id + 0.5f)));
    b.qs[j] = uint8_t((lo & 15) | (hi & 15) << 4);
    qh |= uint32_t(lo >> 4) << j | uint32_t(hi >> 4) << (j + 16);
  }
  put_qh(b.qh, qh);
}

void q8_0(const float *x, minfer_block_q8_0 &b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
  b.d = h(d);
  for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(std::roundf(x[j] * id));
}

// Unsigned sub-block range: x ~ scale * q - min, q in [0, levels]; min >= 0 (x's minimum, or 0).
void range_params(const float *x, int n, int levels, float &scale, float &min) {
  float lo = std::min(0.0f, *std::min_element(x, x + n)), hi = *std::max_element(x, x + n);
  scale = (hi - lo) / float(levels);
  min = -lo;
}

// Value i's q for x = d*sc*q - dmin*m (rounded, clamped to [0, levels]).
int unsigned_q(float x, float d_sc, float dmin_m, int levels) {
  return d_sc > 0 ? clampi(nearest((x + dmin_m) / d_sc), 0, levels) : 0;
}

void q2_k(const float *x, minfer_block_q2_k &b) {
  float sc[16], mn[16];
  for (int j = 0; j < 16; ++j) range_params(x + 16 * j, 16, 3, sc[j], mn[j]);
  const float d = *std::max_element(sc, sc + 16) / 15, dmin = *std::max_element(mn, mn + 16) / 15;
  b.d = h(d);
  b.dmin = h(dmin);
  const float dq = f16_to_f32(b.d), dminq = f16_to_f32(b.dmin);  // quantize against what decoders read
  std::memset(b.qs, 0, sizeof b.qs);
  for (int j = 0; j < 16; ++j) {
    const int ls = dq > 0 ? clampi(nearest(sc[j] / dq), 0, 15) : 0;
    const int lm = dminq > 0 ? clampi(nearest(mn[j] / dminq), 0, 15) : 0;
    b.scales[j] = uint8_t(ls | lm << 4);
    for (int k = 0; k < 16; ++k) {
      const int i = 16 * j + k, half = i / 128, shift = (i % 128) / 32, l = i % 32;
      const int q = unsigned_q(x[i], dq * float(ls), dminq * float(lm), 3);
      b.qs[32 * half + l] |= uint8_t(q << (2 * shift));
    }
  }
}

void q3_k(const float *x, minfer_block_q3_k &b) {
  float s[16];  // signed sub-block scales: x ~ s * q, q in [-4, 3]
  for (int j = 0; j < 16; ++j) s[j] = signed_absmax(x + 16 * j, 16) / -4;
  float smax = 0;
  for (float v : s)
    if (std::fabs(v) > std::fabs(smax)) smax = v;
  const float d = smax / -32;
  b.d = h(d);
  const float dq = f16_to_f32(b.d);
  std::memset(b.hmask, 0, sizeof b.hmask);
  std::memset(b.qs, 0, sizeof b.qs);
  std::memset(b.scales, 0, sizeof b.scales);
  for (int j = 0; j < 16; ++j) {
    const int sc = dq != 0 ? clampi(nearest(s[j] / dq), -32, 31) : 0;
    const int u = sc + 32;  // 6 bits: low 4 in nibbles of bytes 0..7, high 2 in bytes 8..11
    if (j < 8) b.scales[j] |= uint8_t(u & 15);
    else b.scales[j - 8] |= uint8_t((u & 15) << 4);
    b.scales[8 + j % 4] |= uint8_t((u >> 4) << (2 * (j / 4)));
    const float step = dq * float(sc);
    for (int k = 0; k < 16; ++k) {
      const int i = 16 * j + k, half = i / 128, shift = (i % 128) / 32, l = i % 32;
      const int q = step != 0 ? clampi(nearest(x[i] / step), -4, 3) : 0;
      const int stored = q + 4;
      b.qs[32 * half + l] |= uint8_t((stored & 3) << (2 * shift));
      if (stored & 4) b.hmask[l] |= uint8_t(1u << (4 * half + shift));
    }
  }
}

// The 12-byte 6-bit (scale, min) packing of Q4_K/Q5_K, inverse of k4_scale_min.
void pack_k4_scales(uint8_t out[12], const int sc[8], const int m[8]) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      out[j] |= uint8_t(sc[j]);
      out[j + 4] |= uint8_t(m[j]);
    } else {
      out[j + 4] = uint8_t((sc[j] & 15) | (m[j] & 15) << 4);
      out[j - 4] |= uint8_t((sc[j] >> 4) << 6);
      out[j] |= uint8_t((m[j] >> 4) << 6);
    }
  }
}

template <class Block>
void q45_k(const float *x, Block &b, int levels, uint8_t *qh) {
  float sc[8], mn[8];
  for (int j = 0; j < 8; ++j) range_params(x + 32 * j, 32, levels, sc[j], mn[j]);
  b.d = h(*std::max_element(sc, sc + 8) / 63);
  b.dmin = h(*std::max_element(mn, mn + 8) / 63);
  const float dq = f16_to_f32(b.d), dminq = f16_to_f32(b.dmin);
  int isc[8], im[8];
  for (int j = 0; j < 8; ++j) {
    isc[j] = dq > 0 ? clampi(nearest(sc[j] / dq), 0, 63) : 0;
    im[j] = dminq > 0 ? clampi(nearest(mn[j] / dminq), 0, 63) : 0;
  }
  pack_k4_scales(b.scales, isc, im);
  std::memset(b.qs, 0, sizeof b.qs);
  if (qh) std::memset(qh, 0, 32);
  for (int i = 0; i < 256; ++i) {
    const int j = i / 32, g = i / 64, hi = (i % 64) / 32, l = i % 32;
    const int q = unsigned_q(x[i], dq * float(isc[j]), dminq * float(im[j]), levels);
    b.qs[32 * g + l] |= uint8_t((q & 15) << (4 * hi));
    if (qh && (q & 16)) qh[l] |= uint8_t(1u << j);
  }
}

void q6_k(const float *x, minfer_block_q6_k &b) {
  float s[16];
  for (int j = 0; j < 16; ++j) s[j] = signed_absmax(x + 16 * j, 16) / -32;
  float smax = 0;
  for (float v : s)
    if (std::fabs(v) > std::fabs(smax)) smax = v;
  b.d = h(smax / -128);
  const float dq = f16_to_f32(b.d);
  std::memset(b.ql, 0, sizeof b.ql);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int j = 0; j < 16; ++j) {
    const int sc = dq != 0 ? clampi(nearest(s[j] / dq), -128, 127) : 0;
    b.scales[j] = int8_t(sc);
    const float step = dq * float(sc);
    for (int k = 0; k < 16; ++k) {
      const int i = 16 * j + k, half = i / 128, quarter = (i % 128) / 32, l = i % 32;
      const int q = step != 0 ? clampi(nearest(x[i] / step), -32, 31) : 0;
      const int u = q + 32;
      b.ql[64 * half + 32 * (quarter % 2) + l] |= uint8_t((u & 15) << (quarter >= 2 ? 4 : 0));
      b.qh[32 * half + l] |= uint8_t((u >> 4) << (2 * quarter));
    }
  }
}

// IQ4_NL's 16 values as floats, and the index of the value nearest each half-unit interval
// [h / 2, (h + 1) / 2) of [-128, 128): the midpoints between neighbours are whole or half
// units, so no interval straddles one (a value exactly on a midpoint takes the upper index).
struct Iq4Table {
  float value[16];
  uint8_t nearest[512];
  Iq4Table() {
    for (int q = 0; q < 16; ++q) value[q] = float(sdk::iq4_value(q));
    for (int h = 0; h < 512; ++h) {
      const float v = float(h - 256) * 0.5f + 0.25f;
      int best = 0;
      for (int q = 1; q < 16; ++q)
        if (std::fabs(v - value[q]) < std::fabs(v - value[best])) best = q;
      nearest[h] = uint8_t(best);
    }
  }
};
const Iq4Table kIq4;

int iq4_nearest(float v) {
  const float h = std::floor(2.0f * std::clamp(v, -128.0f, 127.75f));
  return kIq4.nearest[int(h) + 256];
}

// The scale s of n values (x ~ s * table[L[i]]) with the least squared error among a few
// tries around the one that maps the value of largest magnitude to the table's end (-127),
// each try's indices refitted by least squares: s = sum(x v) / sum(v v), whose error
// sum(x x) - sum(x v)^2 / sum(v v) is least where sum(x v)^2 / sum(v v) is most. L gets the
// chosen indices.
float iq4_fit(const float *x, int n, uint8_t *L) {
  const float max = signed_absmax(x, n);
  if (max == 0) {
    for (int i = 0; i < n; ++i) L[i] = uint8_t(iq4_nearest(0));
    return 0;
  }
  float best_s = 0, best_fit = -1;
  uint8_t q[32];
  for (int t = -8; t <= 8; ++t) {
    const float inv = (-127.0f + float(t)) / max;
    float sxv = 0, svv = 0;
    for (int i = 0; i < n; ++i) {
      q[i] = uint8_t(iq4_nearest(x[i] * inv));
      const float v = kIq4.value[q[i]];
      sxv += x[i] * v, svv += v * v;
    }
    const float fit = svv > 0 ? sxv * sxv / svv : 0;
    if (fit > best_fit) best_fit = fit, best_s = svv > 0 ? sxv / svv : 0, std::memcpy(L, q, size_t(n));
  }
  return best_s;
}

// Indices j < 16 and j + 16 of 32 as Q4_0's nibbles.
void pack_nibbles32(const uint8_t *L, uint8_t *qs) {
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(L[j] | L[j + 16] << 4);
}

void iq4_nl(const float *x, minfer_block_iq4_nl &b) {
  uint8_t L[32];
  b.d = h(iq4_fit(x, 32, L));
  const float dq = f16_to_f32(b.d);  // the indices against the scale decoders read
  if (dq != 0)
    for (int i = 0; i < 32; ++i) L[i] = uint8_t(iq4_nearest(x[i] / dq));
  pack_nibbles32(L, b.qs);
}

void iq4_xs(const float *x, minfer_block_iq4_xs &b) {
  uint8_t L[32];
  float s[8], smax = 0;
  for (int j = 0; j < 8; ++j) {
    s[j] = iq4_fit(x + 32 * j, 32, L);
    if (std::fabs(s[j]) > std::fabs(smax)) smax = s[j];
  }
  b.d = h(smax / -32);  // 6-bit scales -32..31: the largest maps to -32
  const float dq = f16_to_f32(b.d);
  b.scales_h = 0;
  std::memset(b.scales_l, 0, sizeof b.scales_l);
  for (int j = 0; j < 8; ++j) {
    const int l = dq != 0 ? clampi(nearest(s[j] / dq), -32, 31) : 0;
    const int u = l + 32;
    b.scales_l[j / 2] |= uint8_t((u & 15) << (4 * (j % 2)));
    b.scales_h |= uint16_t((u >> 4) << (2 * j));
    const float step = dq * float(l);
    for (int i = 0; i < 32; ++i) L[i] = uint8_t(iq4_nearest(step != 0 ? x[32 * j + i] / step : 0));
    pack_nibbles32(L, b.qs + 16 * j);
  }
}

template <class Block, class F>
void blocks(const float *x, void *dst, int64_t n, int per, F &&f) {
  auto *out = static_cast<Block *>(dst);
  for (int64_t b = 0; b < n / per; ++b) f(x + b * per, out[b]);
}

}  // namespace

bool can_quantize(int32_t dtype) {
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: case MINFER_DTYPE_Q4_1: case MINFER_DTYPE_Q5_0: case MINFER_DTYPE_Q5_1:
    case MINFER_DTYPE_Q8_0: case MINFER_DTYPE_Q2_K: case MINFER_DTYPE_Q3_K: case MINFER_DTYPE_Q4_K:
    case MINFER_DTYPE_Q5_K: case MINFER_DTYPE_Q6_K: case MINFER_DTYPE_IQ4_NL: case MINFER_DTYPE_IQ4_XS:
      return true;
    default:
      return false;
  }
}

void quantize_row(int32_t dtype, const float *x, void *dst, int64_t n) {
  const minfer_dtype_traits t = minfer_dtype_info(dtype);
  if (!can_quantize(dtype)) throw Error(std::string("no quantizer for ") + minfer_dtype_name(dtype));
  if (n % t.block_values != 0)
    throw Error("quantize: " + std::to_string(n) + " values do not fill whole " + t.name + " blocks of " +
                std::to_string(t.block_values));
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: blocks<minfer_block_q4_0>(x, dst, n, 32, q4_0); break;
    case MINFER_DTYPE_Q4_1: blocks<minfer_block_q4_1>(x, dst, n, 32, q4_1); break;
    case MINFER_DTYPE_Q5_0: blocks<minfer_block_q5_0>(x, dst, n, 32, q5_0); break;
    case MINFER_DTYPE_Q5_1: blocks<minfer_block_q5_1>(x, dst, n, 32, q5_1); break;
    case MINFER_DTYPE_Q8_0: blocks<minfer_block_q8_0>(x, dst, n, 32, q8_0); break;
    case MINFER_DTYPE_Q2_K: blocks<minfer_block_q2_k>(x, dst, n, 256, q2_k); break;
    case MINFER_DTYPE_Q3_K: blocks<minfer_block_q3_k>(x, dst, n, 256, q3_k); break;
    case MINFER_DTYPE_Q4_K:
      blocks<minfer_block_q4_k>(x, dst, n, 256, [](const float *v, minfer_block_q4_k &b) { q45_k(v, b, 15, nullptr); });
      break;
    case MINFER_DTYPE_Q5_K:
      blocks<minfer_block_q5_k>(x, dst, n, 256, [](const float *v, minfer_block_q5_k &b) { q45_k(v, b, 31, b.qh); });
      break;
    case MINFER_DTYPE_Q6_K: blocks<minfer_block_q6_k>(x, dst, n, 256, q6_k); break;
    case MINFER_DTYPE_IQ4_NL: blocks<minfer_block_iq4_nl>(x, dst, n, 32, iq4_nl); break;
    case MINFER_DTYPE_IQ4_XS: blocks<minfer_block_iq4_xs>(x, dst, n, 256, iq4_xs); break;
  }
}

void quantize_rows(int32_t dtype, const float *x, void *dst, int64_t rows, int64_t row_len, int threads) {
  const minfer_dtype_traits t = minfer_dtype_info(dtype);
  if (!t.name) throw Error("quantize: unknown dtype " + std::to_string(dtype));
  if (row_len % t.block_values != 0)
    throw Error("quantize: rows of " + std::to_string(row_len) + " values do not fill whole " + t.name + " blocks");
  const int64_t row_bytes = row_len / t.block_values * t.block_bytes;
  auto *out = static_cast<uint8_t *>(dst);
  auto one_row = [&](int64_t r) {
    const float *src = x + r * row_len;
    uint8_t *o = out + r * row_bytes;
    if (dtype == MINFER_DTYPE_F32) {
      std::memcpy(o, src, size_t(row_len) * 4);
    } else if (dtype == MINFER_DTYPE_F16) {
      for (int64_t i = 0; i < row_len; ++i) {
        const uint16_t v = f32_to_f16(src[i]);
        std::memcpy(o + 2 * i, &v, 2);
      }
    } else if (dtype == MINFER_DTYPE_BF16) {
      for (int64_t i = 0; i < row_len; ++i) {  // round to nearest even on the upper 16 bits
        uint32_t u;
        std::memcpy(&u, &src[i], 4);
        const uint16_t v = std::isnan(src[i]) ? uint16_t((u >> 16) | 0x40) : uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
        std::memcpy(o + 2 * i, &v, 2);
      }
    } else {
      quantize_row(dtype, src, o, row_len);
    }
  };
  parallel_ranges(rows, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) one_row(r);
  });
}

}  // namespace minfer::quant
