// core/dtype.hpp: every code decodes like CUDA (exhaustive) and encodes like CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/dtype.hpp"

#if defined(TANDEM_HAVE_CUDA_HEADERS)
#include <cuda_bf16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#endif

namespace tandem {
namespace {

bool same_value(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || float_bits(a) == float_bits(b);
}

// Floats that stress rounding: every bf16 pattern with low halves at and around the midpoint,
// plus random bit patterns.
std::vector<float> probe_floats() {
  std::vector<float> v;
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) v.push_back(bits_float(hi << 16 | lo));
  std::mt19937 rng(42);
  for (int i = 0; i < 200000; ++i) v.push_back(bits_float(rng()));
  return v;
}

TEST(Bf16, DecodeIsTheUpperHalf) {
  for (uint32_t c = 0; c < 0x10000; ++c)
    ASSERT_EQ(float_bits(bf16_decode(static_cast<uint16_t>(c))), c << 16) << c;
}

TEST(Bf16, EncodeRoundsToNearestEvenAndRoundTrips) {
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float x = bf16_decode(static_cast<uint16_t>(c));
    if (!std::isnan(x)) {
      ASSERT_EQ(bf16_encode(x), c);
    }
  }
  EXPECT_EQ(bf16_encode(bits_float(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(bf16_encode(bits_float(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16_encode(bits_float(0x3f808001)), 0x3f81);
  EXPECT_EQ(bf16_encode(std::numeric_limits<float>::quiet_NaN()), 0x7fff);
}

// Nearest-value check independent of any bit trick: brute force over all finite codes.
template <class Decode>
float nearest_even(float x, int codes, Decode decode, float max_finite) {
  if (std::fabs(x) > max_finite) return std::copysign(max_finite, x);  // saturating
  float best = NAN;
  int best_code = -1;
  for (int c = 0; c < codes; ++c) {
    const float v = decode(c);
    if (std::isnan(v)) continue;
    const double e = std::fabs(double(v) - x), eb = std::fabs(double(best) - x);
    if (best_code < 0 || e < eb || (e == eb && (c & 1) == 0 && (best_code & 1) == 1))
      best = v, best_code = c;
  }
  return best;
}

TEST(E4m3, EncodeIsNearestEvenSaturating) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-10.0f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::copysign(std::exp2(mag(rng)), (rng() & 1) ? 1.0f : -1.0f);
    const float want = nearest_even(
        x, 256, [](int c) { return e4m3_decode(uint8_t(c)); }, 448.0f);
    ASSERT_TRUE(same_value(e4m3_decode(e4m3_encode(x)), want) ||
                (want == 0 && e4m3_decode(e4m3_encode(x)) == 0))
        << x;
  }
  for (int c = 0; c < 256; ++c)
    if (!std::isnan(e4m3_decode(uint8_t(c)))) {
      ASSERT_EQ(e4m3_encode(e4m3_decode(uint8_t(c))), c);
    }
  EXPECT_EQ(e4m3_decode(0x7e), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));
}

TEST(E2m1, EncodeIsNearestEvenSaturating) {
  for (int c = 0; c < 16; ++c) ASSERT_EQ(e2m1_encode(e2m1_decode(uint8_t(c))), c == 8 ? 8 : c);
  const float xs[] = {0.2f, 0.25f, 0.3f, 0.75f, 1.25f, 1.75f,  2.5f,
                      3.5f, 5.0f,  5.1f, 7.0f,  1e9f,  -0.75f, -5.0f};
  for (float x : xs) {
    const float want = nearest_even(
        x, 16, [](int c) { return e2m1_decode(uint8_t(c)); }, 6.0f);
    EXPECT_EQ(e2m1_decode(e2m1_encode(x)), want) << x;
  }
}

TEST(Ue8m0, DecodeIsAPowerOfTwoAndEncodeRoundsUp) {
  for (int c = 0; c < 255; ++c) ASSERT_EQ(ue8m0_decode(uint8_t(c)), std::ldexp(1.0f, c - 127)) << c;
  EXPECT_TRUE(std::isnan(ue8m0_decode(0xff)));
  for (int c = 1; c < 254; ++c) {
    const float p = std::ldexp(1.0f, c - 127);
    ASSERT_EQ(ue8m0_encode(p), c);             // exact powers stay
    ASSERT_EQ(ue8m0_encode(p * 1.5f), c + 1);  // anything above rounds up
  }
}

#if defined(TANDEM_HAVE_CUDA_HEADERS)
TEST(CudaParity, Bf16EncodeMatchesCuda) {
  for (float x : probe_floats())
    ASSERT_EQ(bf16_encode(x), __bfloat16_as_ushort(__float2bfloat16(x))) << float_bits(x);
}

TEST(CudaParity, E4m3AllCodesDecodeAndEncodeLikeCuda) {
  for (int c = 0; c < 256; ++c) {
    const float cuda = __half2float(__half(__nv_cvt_fp8_to_halfraw(uint8_t(c), __NV_E4M3)));
    ASSERT_TRUE(same_value(e4m3_decode(uint8_t(c)), cuda)) << c;
  }
  for (float x : probe_floats())
    ASSERT_EQ(e4m3_encode(x), __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)) << float_bits(x);
}

TEST(CudaParity, Ue8m0AllCodesDecodeAndEncodeLikeCuda) {
  for (int c = 0; c < 256; ++c) {
    const float cuda = __bfloat162float(__nv_bfloat16(__nv_cvt_e8m0_to_bf16raw(uint8_t(c))));
    ASSERT_TRUE(same_value(ue8m0_decode(uint8_t(c)), cuda)) << c;
  }
  for (float x : probe_floats())
    ASSERT_EQ(ue8m0_encode(x), __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf))
        << float_bits(x);
}

TEST(CudaParity, E2m1AllCodesDecodeAndEncodeLikeCuda) {
  for (int c = 0; c < 16; ++c) {
    const float cuda = __half2float(__half(__nv_cvt_fp4_to_halfraw(uint8_t(c), __NV_E2M1)));
    ASSERT_TRUE(same_value(e2m1_decode(uint8_t(c)), cuda)) << c;
  }
  for (float x : probe_floats())
    ASSERT_EQ(e2m1_encode(x), __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest))
        << float_bits(x);
}
#else
TEST(CudaParity, NeedsCudaHeaders) {
  GTEST_SKIP() << "CUDA headers not found: parity with CUDA's conversions not checked";
}
#endif

}  // namespace
}  // namespace tandem
