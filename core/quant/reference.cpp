#include "quant/reference.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "minfer/dtype.h"

namespace minfer::quant {
namespace {

uint16_t u16(const uint8_t *p) { return uint16_t(p[0] | p[1] << 8); }
float h(const uint8_t *p) { return f16_to_f32(u16(p)); }

// The 4-bit value i of 32 stored as 16 bytes: i < 16 low nibble of byte i, else high of i-16.
int nibble32(const uint8_t *qs, int i) { return i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4); }

// Bit i of a 32-bit little-endian word.
int bit(const uint8_t *qh, int i) { return (qh[i / 8] >> (i % 8)) & 1; }

// 6-bit scale/min pair j of the 12-byte Q4_K/Q5_K scale area.
void scale_min_k4(const uint8_t *s, int j, int *sc, int *m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

float value_q2_k(const uint8_t *b, int i) {
  const uint8_t *scales = b, *qs = b + 16;
  const float d = h(b + 80), dmin = h(b + 82);
  const int half = i / 128, shift = (i % 128) / 32, l = i % 32;
  const int q = (qs[32 * half + l] >> (2 * shift)) & 3;
  const uint8_t sc = scales[8 * half + 2 * shift + l / 16];
  return d * float(sc & 15) * float(q) - dmin * float(sc >> 4);
}

float value_q3_k(const uint8_t *b, int i) {
  const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
  const float d = h(b + 108);
  const int half = i / 128, shift = (i % 128) / 32, l = i % 32;
  const int s = 8 * half + 2 * shift + l / 16;
  const int low4 = s < 8 ? (sc[s] & 15) : (sc[s - 8] >> 4);
  const int high2 = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
  const int scale = (low4 | high2 << 4) - 32;
  const int q = (qs[32 * half + l] >> (2 * shift)) & 3;
  const int hi = (hmask[l] >> (4 * half + shift)) & 1;
  return d * float(scale) * float(q - (hi ? 0 : 4));
}

float value_q4_k(const uint8_t *b, int i) {
  const float d = h(b), dmin = h(b + 2);
  const uint8_t *scales = b + 4, *qs = b + 16;
  const int sub = i / 32, l = i % 32;
  int sc, m;
  scale_min_k4(scales, sub, &sc, &m);
  const uint8_t byte = qs[32 * (sub / 2) + l];
  const int q = (sub % 2) ? (byte >> 4) : (byte & 15);
  return d * float(sc) * float(q) - dmin * float(m);
}

float value_q5_k(const uint8_t *b, int i) {
  const float d = h(b), dmin = h(b + 2);
  const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
  const int sub = i / 32, l = i % 32;
  int sc, m;
  scale_min_k4(scales, sub, &sc, &m);
  const uint8_t byte = qs[32 * (sub / 2) + l];
  const int q = ((sub % 2) ? (byte >> 4) : (byte & 15)) | ((qh[l] >> sub) & 1) << 4;
  return d * float(sc) * float(q) - dmin * float(m);
}

float value_q6_k(const uint8_t *b, int i) {
  const uint8_t *ql = b, *qh = b + 128;
  const int8_t *scales = reinterpret_cast<const int8_t *>(b + 192);
  const float d = h(b + 208);
  const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
  const uint8_t lbyte = ql[64 * half + 32 * (quarter % 2) + l];
  const int low4 = quarter < 2 ? (lbyte & 15) : (lbyte >> 4);
  const int high2 = (qh[32 * half + l] >> (2 * quarter)) & 3;
  const int scale = scales[8 * half + 2 * quarter + l / 16];
  return d * float(scale) * float((low4 | high2 << 4) - 32);
}

// IQ4_NL's and IQ4_XS's 16 values, as ggml lists them.
constexpr int kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

float value_iq4_xs(const uint8_t *b, int i) {
  const float d = h(b);
  const int scales_h = u16(b + 2), sub = i / 32;
  const int low4 = (b[4 + sub / 2] >> (4 * (sub % 2))) & 15, high2 = (scales_h >> (2 * sub)) & 3;
  return d * float((low4 | high2 << 4) - 32) * float(kIq4Values[nibble32(b + 8 + 16 * sub, i % 32)]);
}

}  // namespace

uint16_t f32_to_f16(float x) {
  const _Float16 v = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &v, 2);
  return bits;
}

float f16_to_f32(uint16_t bits) {
  _Float16 v;
  std::memcpy(&v, &bits, 2);
  return static_cast<float>(v);
}

float block_value(int32_t dtype, const uint8_t *b, int i) {
  switch (dtype) {
    case MINFER_DTYPE_Q4_0: return h(b) * float(nibble32(b + 2, i) - 8);
    case MINFER_DTYPE_Q4_1: return h(b) * float(nibble32(b + 4, i)) + h(b + 2);
    case MINFER_DTYPE_Q5_0: return h(b) * float((nibble32(b + 6, i) | bit(b + 2, i) << 4) - 16);
    case MINFER_DTYPE_Q5_1:
      return h(b) * float(nibble32(b + 8, i) | bit(b + 4, i) << 4) + h(b + 2);
    case MINFER_DTYPE_Q8_0: return h(b) * float(int8_t(b[2 + i]));
    case MINFER_DTYPE_Q8_1: return h(b) * float(int8_t(b[4 + i]));
    case MINFER_DTYPE_Q2_K: return value_q2_k(b, i);
    case MINFER_DTYPE_Q3_K: return value_q3_k(b, i);
    case MINFER_DTYPE_Q4_K: return value_q4_k(b, i);
    case MINFER_DTYPE_Q5_K: return value_q5_k(b, i);
    case MINFER_DTYPE_Q6_K: return value_q6_k(b, i);
    case MINFER_DTYPE_IQ4_NL: return h(b) * float(kIq4Values[nibble32(b + 2, i)]);
    case MINFER_DTYPE_IQ4_XS: return value_iq4_xs(b, i);
    case MINFER_DTYPE_Q8_K: {
      float d;
      std::memcpy(&d, b, 4);
      return d * float(int8_t(b[4 + i]));
    }
    default:
      throw Error(std::string("no reference decoder for dtype ") + minfer_dtype_name(dtype));
  }
}

void dequantize_row(int32_t dtype, const void *src, float *dst, int64_t n) {
  const auto *p = static_cast<const uint8_t *>(src);
  const minfer_dtype_traits t = minfer_dtype_info(dtype);
  if (dtype == MINFER_DTYPE_F32) {
    std::memcpy(dst, p, size_t(n) * 4);
  } else if (dtype == MINFER_DTYPE_F16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(u16(p + 2 * i));
  } else if (dtype == MINFER_DTYPE_BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = uint32_t(u16(p + 2 * i)) << 16;
      std::memcpy(&dst[i], &bits, 4);
    }
  } else if (t.is_quantized) {
    if (n % t.block_values != 0)
      throw Error("dequantize_row: " + std::to_string(n) + " values is not a multiple of " +
                  t.name + "'s block of " + std::to_string(t.block_values));
    for (int64_t i = 0; i < n; ++i)
      dst[i] = block_value(dtype, p + (i / t.block_values) * t.block_bytes,
                           int(i % t.block_values));
  } else {
    throw Error(std::string("dequantize_row: dtype ") + minfer_dtype_name(dtype) +
                " is not a storage type of weights");
  }
}

std::vector<uint8_t> quantize_q8_0(const float *x, int64_t n) {
  if (n % 32 != 0) throw Error("quantize_q8_0: n = " + std::to_string(n) + " is not a multiple of 32");
  std::vector<uint8_t> out(size_t(n / 32) * 34);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    uint8_t *blk = out.data() + 34 * b;
    const uint16_t dh = f32_to_f16(d);
    blk[0] = uint8_t(dh & 0xff);
    blk[1] = uint8_t(dh >> 8);
    for (int j = 0; j < 32; ++j) blk[2 + j] = uint8_t(int8_t(std::lround(x[32 * b + j] * id)));
  }
  return out;
}

}  // namespace minfer::quant
