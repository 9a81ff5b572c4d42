// core/quant/quantize.hpp — round-to-nearest quantizers from f32 into GGUF block layouts.
//
// The bytes are the layouts GGUF files in the wild use (minfer/blocks.h), so files minfer
// writes load in other GGUF tools and the reverse. Legacy types (Q4_0..Q8_0) round exactly as
// llama.cpp's reference quantizers do; K-quants pick each sub-block's scale (and min) from its
// range, then the super-block scales from those: plain round-to-nearest, no search.
#pragma once

#include <cstdint>

namespace minfer::quant {

// True for the block types quantize_row can write.
bool can_quantize(int32_t dtype);

// Quantizes n values (a multiple of the block size) of x into dst (n / block * block_bytes).
// Throws minfer::Error for a dtype it cannot write or a partial block.
void quantize_row(int32_t dtype, const float *x, void *dst, int64_t n);

// rows x row_len values, split over `threads` threads (0 = all cores). Also takes f32, f16
// and bf16 as targets (plain conversion), so a caller can treat every type alike.
void quantize_rows(int32_t dtype, const float *x, void *dst, int64_t rows, int64_t row_len, int threads);

}  // namespace minfer::quant
