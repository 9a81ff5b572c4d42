// Block layouts and codecs: the SDK's per-block decoders (used by every plugin) against the
// core's per-value reference, plus known answers a person can check by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "minfer/blocks.h"
#include "minfer/decode.hpp"
#include "minfer/dtype.h"
#include "quant/reference.hpp"
#include "test_util.hpp"

namespace {

using minfer::test::random_blocks;

TEST(DTypeTable, BlockSizesMatchTheStructs) {
  struct Row { int32_t dtype; size_t size; int values; };
  const Row rows[] = {
      {MINFER_DTYPE_Q4_0, sizeof(minfer_block_q4_0), 32}, {MINFER_DTYPE_Q4_1, sizeof(minfer_block_q4_1), 32},
      {MINFER_DTYPE_Q5_0, sizeof(minfer_block_q5_0), 32}, {MINFER_DTYPE_Q5_1, sizeof(minfer_block_q5_1), 32},
      {MINFER_DTYPE_Q8_0, sizeof(minfer_block_q8_0), 32}, {MINFER_DTYPE_Q8_1, sizeof(minfer_block_q8_1), 32},
      {MINFER_DTYPE_Q2_K, sizeof(minfer_block_q2_k), 256}, {MINFER_DTYPE_Q3_K, sizeof(minfer_block_q3_k), 256},
      {MINFER_DTYPE_Q4_K, sizeof(minfer_block_q4_k), 256}, {MINFER_DTYPE_Q5_K, sizeof(minfer_block_q5_k), 256},
      {MINFER_DTYPE_Q6_K, sizeof(minfer_block_q6_k), 256}, {MINFER_DTYPE_Q8_K, sizeof(minfer_block_q8_k), 256},
      {MINFER_DTYPE_IQ4_NL, sizeof(minfer_block_iq4_nl), 32}, {MINFER_DTYPE_IQ4_XS, sizeof(minfer_block_iq4_xs), 256},
  };
  for (const Row &r : rows) {
    const minfer_dtype_traits t = minfer_dtype_info(r.dtype);
    EXPECT_EQ(size_t(t.block_bytes), r.size) << t.name;
    EXPECT_EQ(t.block_values, r.values) << t.name;
    EXPECT_TRUE(t.is_quantized) << t.name;
  }
  // GGUF's type ids, so a file's tensor type needs no translation.
  EXPECT_EQ(MINFER_DTYPE_F32, 0);
  EXPECT_EQ(MINFER_DTYPE_Q8_0, 8);
  EXPECT_EQ(MINFER_DTYPE_Q6_K, 14);
  EXPECT_EQ(MINFER_DTYPE_I32, 26);
  EXPECT_EQ(MINFER_DTYPE_BF16, 30);
  EXPECT_EQ(MINFER_DTYPE_IQ4_NL, 20);
  EXPECT_EQ(MINFER_DTYPE_IQ4_XS, 23);
  EXPECT_EQ(minfer_dtype_info(4).name, nullptr);  // retired Q4_2
}

TEST(KnownAnswers, Q4_0NibbleOrder) {
  minfer_block_q4_0 b{};
  b.d = minfer::quant::f32_to_f16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);  // low = j, high = 15 - j
  float y[32];
  minfer::sdk::decode_block(b, [&](int i, float v) { y[i] = v; });
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * float(j - 8)) << "value " << j << " is the low nibble of byte " << j;
    EXPECT_EQ(y[j + 16], 0.5f * float(7 - j)) << "value " << j + 16 << " is the high nibble";
  }
}

TEST(KnownAnswers, Q5_0HighBitsAndQ8_0) {
  minfer_block_q5_0 b{};
  b.d = minfer::quant::f32_to_f16(1.0f);
  b.qh[0] = 0x01;  // bit 0: value 0 gets +16
  b.qh[2] = 0x01;  // bit 16: value 16 gets +16
  std::memset(b.qs, 0, sizeof b.qs);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_Q5_0, reinterpret_cast<uint8_t *>(&b), 0), 0.0f);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_Q5_0, reinterpret_cast<uint8_t *>(&b), 1), -16.0f);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_Q5_0, reinterpret_cast<uint8_t *>(&b), 16), 0.0f);

  minfer_block_q8_0 q{};
  q.d = minfer::quant::f32_to_f16(0.25f);
  q.qs[5] = -128;
  q.qs[31] = 127;
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_Q8_0, reinterpret_cast<uint8_t *>(&q), 5), -32.0f);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_Q8_0, reinterpret_cast<uint8_t *>(&q), 31), 31.75f);
}

TEST(KnownAnswers, Q4_KScaleUnpacking) {
  minfer_block_q4_k b{};
  b.d = minfer::quant::f32_to_f16(1.0f);
  b.dmin = minfer::quant::f32_to_f16(1.0f);
  // sub-block 5: scale = (scales[9] & 15) | (scales[1] >> 6) << 4, min = (scales[9] >> 4) | (scales[5] >> 6) << 4
  b.scales[9] = 0x32;          // scale low 2, min low 3
  b.scales[1] = 0x40;          // scale high bits 01 -> +16
  b.scales[5] = 0x80;          // min high bits 10 -> +32
  std::memset(b.qs, 0x11, sizeof b.qs);  // every q = 1
  // value 5*32 = 160: sub-block 5 is the high nibbles of bytes 64..95
  const float v = minfer::quant::block_value(MINFER_DTYPE_Q4_K, reinterpret_cast<uint8_t *>(&b), 160);
  EXPECT_EQ(v, 18.0f * 1.0f - 35.0f);
}

TEST(KnownAnswers, Iq4NonLinearValues) {
  // ggml's 16 values, index 0 (-127) to 15 (113), in Q4_0's nibble order.
  minfer_block_iq4_nl b{};
  b.d = minfer::quant::f32_to_f16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t(j | (15 - j) << 4);
  const auto *p = reinterpret_cast<const uint8_t *>(&b);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_IQ4_NL, p, 0), -63.5f);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_IQ4_NL, p, 8), 0.5f);    // index 8: 1
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_IQ4_NL, p, 15), 56.5f);  // index 15: 113
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_IQ4_NL, p, 16), 56.5f);  // high nibble of byte 0
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_IQ4_NL, p, 24), -5.0f);  // byte 8 high: index 7, -10
  float y[32];
  minfer::sdk::decode_block(b, [&](int i, float v) { y[i] = v; });
  const int table[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(y[j], 0.5f * float(table[j])) << j;

  // IQ4_XS sub-block 5: low 4 bits of its scale in the high nibble of scales_l[2], high 2 bits
  // at bits 10-11 of scales_h: 7 | 2 << 4 = 39, less 32 = 7.
  minfer_block_iq4_xs x{};
  x.d = minfer::quant::f32_to_f16(1.0f);
  x.scales_l[2] = 0x70;
  x.scales_h = uint16_t(2u << 10);
  x.qs[16 * 5 + 3] = 0x0f;  // value 5*32 + 3: index 15; value 5*32 + 19: index 0
  const auto *q = reinterpret_cast<const uint8_t *>(&x);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_IQ4_XS, q, 163), 7.0f * 113);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_IQ4_XS, q, 179), 7.0f * -127);
  EXPECT_EQ(minfer::quant::block_value(MINFER_DTYPE_IQ4_XS, q, 0), -32.0f * -127);  // sub-block 0: scale 0 - 32, index 0
}

class CodecAgreement : public ::testing::TestWithParam<int32_t> {};

// Two independent readings of every layout agree bit for bit on random blocks.
TEST_P(CodecAgreement, SdkDecoderEqualsCoreReference) {
  const int32_t dtype = GetParam();
  const minfer_dtype_traits t = minfer_dtype_info(dtype);
  const int n_blocks = 200;
  const std::vector<uint8_t> bytes = random_blocks(dtype, n_blocks, 1234 + dtype);
  std::vector<float> ref(size_t(n_blocks) * t.block_values), sdk(ref.size());
  minfer::quant::dequantize_row(dtype, bytes.data(), ref.data(), int64_t(ref.size()));
  minfer::sdk::visit_block_dtype(dtype, [&](auto tag) {
    using Block = typename decltype(tag)::type;
    for (int b = 0; b < n_blocks; ++b) {
      Block blk;
      std::memcpy(&blk, bytes.data() + size_t(b) * sizeof(Block), sizeof(Block));
      minfer::sdk::decode_block(blk, [&](int i, float v) { sdk[size_t(b) * t.block_values + i] = v; });
    }
  });
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(sdk[i], ref[i]) << t.name << " value " << i;
}

INSTANTIATE_TEST_SUITE_P(AllBlockTypes, CodecAgreement,
                         ::testing::ValuesIn(minfer::test::block_dtypes()),
                         [](const auto &info) { return std::string(minfer_dtype_name(info.param)); });

TEST(Half, DecodeEveryHalfLikeTheCompiler) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = minfer::sdk::half_to_float(uint16_t(h)), b = minfer::quant::f16_to_f32(uint16_t(h));
    if (std::isnan(b)) ASSERT_TRUE(std::isnan(a)) << h;
    else ASSERT_EQ(a, b) << "half bits " << h;
  }
}

TEST(Half, EncodeRoundsToNearestEvenLikeTheCompiler) {
  // A stride through all 2^32 float bit patterns: normals, subnormals, ties, overflow, NaN.
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 251) {
    const uint32_t bits = uint32_t(u);
    float f;
    std::memcpy(&f, &bits, 4);
    const uint16_t a = minfer::sdk::float_to_half(f), b = minfer::quant::f32_to_f16(f);
    if (std::isnan(f)) ASSERT_TRUE((a & 0x7c00) == 0x7c00 && (a & 0x3ff)) << bits;
    else ASSERT_EQ(a, b) << "float bits " << bits;
  }
  EXPECT_EQ(minfer::sdk::float_to_half(65520.0f), 0x7c00);  // rounds up to inf
  EXPECT_EQ(minfer::sdk::float_to_half(65519.0f), 0x7bff);  // largest finite
}

}  // namespace
