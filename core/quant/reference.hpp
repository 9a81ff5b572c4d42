// core/quant/reference.hpp — scalar reference codecs, written for obviousness, not speed.
//
// These decode each value on its own from the GGUF block bytes (a different formulation from
// the per-block decoders in sdk/minfer/decode.hpp that the plugins use), so tests that compare
// a plugin against them check two independent readings of the layouts.
#pragma once

#include <cstdint>
#include <vector>

namespace minfer::quant {

// Value i (0 <= i < block_values) of the block at `block`, for any block dtype.
float block_value(int32_t dtype, const uint8_t *block, int i);

// Converts n values of any storage dtype (f32, f16, bf16, every block type) to f32.
// n must be a multiple of the block size. Throws minfer::Error for other dtypes.
void dequantize_row(int32_t dtype, const void *src, float *dst, int64_t n);

// IEEE half conversions done by the compiler's _Float16 (round to nearest even).
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);

// Round-to-nearest Q8_0 (d = max|x| / 127): enough for demos and tests until the full set of
// quantizers lands. n must be a multiple of 32.
std::vector<uint8_t> quantize_q8_0(const float *x, int64_t n);

}  // namespace minfer::quant
