// core/dtype.hpp's FP8 tile quantizer and core/fp8_blocks: the scale is the smallest power of two
// at or above max(amax, 1e-4) x fp32(1/448); codes saturate at 448; block-scaled weights keep one
// scale per B x B block; quantizing values that already are a block's codes gives them back.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
#include "core/fp8_blocks.hpp"

namespace tandem {
namespace {

float scale_of(float amax) { return ue8m0_decode(fp8_tile_scale_code(amax)); }

TEST(Fp8Quantizer, ScaleIsTheCeilingPowerOfTwoOfTheFloorOrAmaxOver448) {
  EXPECT_EQ(scale_of(1.0f), std::ldexp(1.0f, -8));   // 1/448 = 1.14 x 2^-9 -> 2^-8
  EXPECT_EQ(scale_of(448.0f), 1.0f);                 // 448 x fp32(1/448) rounds to 1 or just below
  EXPECT_EQ(scale_of(0.0f), std::ldexp(1.0f, -22));  // the 1e-4 floor: 2.2e-7 -> 2^-22
  EXPECT_EQ(scale_of(3.5f), std::ldexp(1.0f, -7));   // 3.5/448 = 2^-7 exactly: no rounding up
  EXPECT_EQ(scale_of(3.5000002f), std::ldexp(1.0f, -6));
}

RC_GTEST_PROP(Fp8Quantizer, ScaleCoversAmaxAndIsTheSmallestSuch, ()) {
  const float amax = std::ldexp(float(*rc::gen::inRange(1, 1 << 24)), *rc::gen::inRange(-40, 40));
  const float y = std::max(amax, 1e-4f) * (1.0f / 448.0f);
  const float s = scale_of(amax);
  RC_ASSERT(s >= y);
  RC_ASSERT(s / 2 < y);
  // The tile's largest value lands in the top binade of e4m3: (224, 448] after rounding.
  const float top = std::fabs(e4m3_decode(fp8_tile_code(-amax, s)));
  RC_ASSERT(top <= 448.0f);
  if (amax >= 1e-4f) RC_ASSERT(top >= 224.0f);
}

// Per tile: |q - x| <= half an e4m3 step (2^-4 relative for normals, 2^-10 of the scale below),
// and quantizing a quantized vector changes nothing.
RC_GTEST_PROP(Fp8Quantizer, TilesRoundToTheirGridAndAreIdempotent, ()) {
  const int block = *rc::gen::element(32, 128);
  const int n = *rc::gen::inRange(1, 400);
  const int exponent = *rc::gen::inRange(-30, 20);
  std::vector<float> x(n);
  for (float& v : x)
    v = std::ldexp(float(*rc::gen::inRange(-(1 << 20), 1 << 20)) / float(1 << 20), exponent);
  std::vector<float> q = x;
  quantize_dequantize_fp8(q, block);
  for (int begin = 0; begin < n; begin += block) {
    float amax = 0;
    for (int i = begin; i < std::min(n, begin + block); ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = scale_of(amax);
    for (int i = begin; i < std::min(n, begin + block); ++i)
      RC_ASSERT(std::fabs(q[i] - x[i]) <= std::max(std::fabs(x[i]) / 16, s / 1024));
  }
  std::vector<float> again = q;
  quantize_dequantize_fp8(again, block);
  RC_ASSERT(again == q);
}

// A checkpoint's block codes, dequantized and quantized again, stand for the same values: the
// harness may hold FP8 weights as their float values without changing what the kernels read.
RC_GTEST_PROP(Fp8Blocks, ValuesOfCodesRoundTripAndEachBlockHasItsScale, ()) {
  const int block = *rc::gen::element(32, 128);
  const int64_t rows = *rc::gen::inRange(1, 300), cols = *rc::gen::inRange(1, 300);
  Tensor<float> w({rows, cols});
  for (float& v : w.data)
    v = std::ldexp(float(*rc::gen::inRange(-1000, 1000)), *rc::gen::inRange(-12, 2));
  const Fp8BlockMatrix q = quantize_fp8_blocks(w, block);
  RC_ASSERT(q.scales.shape == (Shape{(rows + block - 1) / block, (cols + block - 1) / block}));
  const Tensor<float> values = dequantize(q);
  for (int64_t i = 0; i < rows * cols; ++i)
    RC_ASSERT(
        std::fabs(values.data[i] - w.data[i]) <=
        std::fabs(w.data[i]) / 16 +
            ue8m0_decode(q.scales.data[(i / cols / block) * q.scales.dim(1) + (i % cols) / block]) /
                1024);
  RC_ASSERT(dequantize(quantize_fp8_blocks(values, block)).data == values.data);
}

// A shared weight's block-FP8 form: quantized once per block size and the same object after (from
// any thread); a stored form handed in (a checkpoint's, here with a scale twice the quantizer's
// choice) is what it gives back for its block, codes as stored, and its values are the codes'.
TEST(Fp8CachedWeight, QuantizesOncePerBlockAndKeepsAStoredForm) {
  Tensor<float> w({70, 40});
  for (int64_t i = 0; i < w.size(); ++i) w.data[i] = float((i * 37) % 101 - 50) / 8;
  const Fp8CachedWeight seeded(w);
  EXPECT_EQ(seeded.data, w.data);
  std::vector<const Fp8BlockMatrix*> got(4);
  {
    std::vector<std::jthread> threads;
    for (size_t t = 0; t < got.size(); ++t)
      threads.emplace_back([&, t] { got[t] = &seeded.fp8_blocks(32); });
  }
  for (const Fp8BlockMatrix* g : got) EXPECT_EQ(g, got[0]);
  EXPECT_EQ(got[0]->codes.data, quantize_fp8_blocks(w, 32).codes.data);
  EXPECT_EQ(seeded.fp8_blocks(128).scales.data, quantize_fp8_blocks(w, 128).scales.data);

  Fp8BlockMatrix stored = quantize_fp8_blocks(w, 32);
  for (uint8_t& s : stored.scales.data) ++s;  // each block's scale doubled ...
  for (uint8_t& c : stored.codes.data)        // ... and its codes halved where exact
    if (const float v = e4m3_decode(c); e4m3_decode(e4m3_encode(v / 2)) == v / 2)
      c = e4m3_encode(v / 2);
  const Fp8CachedWeight checkpoint(stored);
  EXPECT_EQ(checkpoint.data, dequantize(stored).data);
  EXPECT_EQ(checkpoint.fp8_blocks(32).scales.data, stored.scales.data);
  EXPECT_EQ(checkpoint.fp8_blocks(32).codes.data, stored.codes.data);
  EXPECT_NE(quantize_fp8_blocks(checkpoint, 32).scales.data, stored.scales.data);
}

TEST(Fp8Blocks, OtherBlockSizesAreBadInput) {
  EXPECT_THROW(quantize_fp8_blocks(Tensor<float>({2, 2}, 1.0f), 64), BadInput);
  std::vector<float> x(8, 1.0f);
  EXPECT_THROW(quantize_dequantize_fp8(x, 0), BadInput);
}

}  // namespace
}  // namespace tandem
