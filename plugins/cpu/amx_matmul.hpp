// plugins/cpu/amx_matmul.hpp — many-token matmuls on AMX tiles (Intel Sapphire Rapids and later).
//
// A weight panel of 16 rows is decoded once per call to bf16 and met by every token through
// AMX-BF16 tile products (16x32 by 32x16 per instruction, f32 accumulators that live in the
// tiles for the whole row). Decoding to bf16 rather than multiplying int8 blocks keeps the
// per-block scales out of the inner loop: with int8 tiles each 32-value block's product has
// to be scaled by AVX-512 code, which bound that version (Qwen2-0.5B Q4_0 pp128: 473 t/s with
// int8 tiles, 646 with bf16, side by side). Decode (one token)
// keeps the VNNI kernels: a tile product would waste 15 of its 16 rows there.
#pragma once

#include <cstdint>

namespace minfer::cpu {

class ThreadPool;

// The CPU has AMX-BF16 and AVX512-BF16 and Linux granted this process the tile state (asked
// once).
bool amx_available();

// From this many tokens a matmul of block-quantized weights takes the AMX path (Qwen2-0.5B
// Q4_0, 2 threads: pp8 VNNI 165 vs AMX 142 t/s, pp10 162 vs 174, pp16 195 vs 270).
inline constexpr int64_t kAmxMinTokens = 10;

// y[t * m + o] = W row o . x[t] for o < m, t < tokens. W: m rows of row_bytes, k values each
// (a multiple of 32) of a block dtype, or (w_in_panels) the same bytes as 16-row panels
// (panels.hpp): Q4_0, Q4_K and Q6_K decoded from them, the others turned back into rows a
// panel at a time; x: tokens rows of k f32.
void amx_matmul(int32_t weight_dtype, const uint8_t *w, int64_t row_bytes, int64_t k, int64_t m, const float *x, int64_t tokens, float *y,
                ThreadPool &pool, bool w_in_panels = false);

}  // namespace minfer::cpu
