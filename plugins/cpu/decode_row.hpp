// plugins/cpu/decode_row.hpp — any weight row (f32, f16, bf16, block types) to f32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "minfer/decode.hpp"
#include "minfer/plugin.hpp"

namespace minfer::cpu {

// Decodes `count` values starting at `src` (whole blocks) into f32.
inline void decode_row_f32(int32_t dtype, const uint8_t *src, float *dst, int64_t count) {
  if (dtype == MINFER_DTYPE_F32) {
    std::memcpy(dst, src, size_t(count) * 4);
    return;
  }
  if (dtype == MINFER_DTYPE_F16 || dtype == MINFER_DTYPE_BF16) {
    const auto *h = reinterpret_cast<const uint16_t *>(src);
    for (int64_t i = 0; i < count; ++i) dst[i] = dtype == MINFER_DTYPE_F16 ? sdk::half_to_float(h[i]) : sdk::bf16_to_float(h[i]);
    return;
  }
  const bool known = sdk::visit_block_dtype(dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    const auto *blocks = reinterpret_cast<const Block *>(src);
    const int64_t per = minfer_dtype_info(dtype).block_values;
    for (int64_t b = 0; b < count / per; ++b)
      sdk::decode_block(blocks[b], [&](int i, float v) { dst[b * per + i] = v; });
  });
  if (!known) throw sdk::Error(MINFER_ERR_UNSUPPORTED, std::string("no decoder for ") + minfer_dtype_name(dtype));
}

}  // namespace minfer::cpu
