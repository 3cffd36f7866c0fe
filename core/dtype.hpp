#pragma once
// Storage dtypes and their codecs, bit-exact with CUDA's conversions (cuda_bf16.h, cuda_fp8.h,
// cuda_fp4.h; checked exhaustively in properties/core/dtype_props.cpp). Usable in kernels.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/hd.hpp"

namespace tandem {

TANDEM_HD inline uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
TANDEM_HD inline float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// ---- bf16: round to nearest even; every NaN becomes the canonical 0x7fff.
TANDEM_HD inline uint16_t bf16_encode(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  const uint32_t rest = u << 16;  // the 16 bits dropped, as a fraction of one bf16 ulp
  uint16_t r = static_cast<uint16_t>(u >> 16);
  if (rest > 0x80000000u || (rest == 0x80000000u && (r & 1u))) ++r;
  return r;
}
TANDEM_HD inline float bf16_decode(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

struct bf16 {
  uint16_t bits;
  constexpr bf16() : bits(0) {}
  TANDEM_HD explicit bf16(float x) : bits(bf16_encode(x)) {}
  TANDEM_HD explicit operator float() const { return bf16_decode(bits); }
};

// ---- fp8 e4m3 (OCP "fn": no Inf, 0x7f/0xff are NaN, max 448), round to nearest even,
// saturating to +-448 (CUDA __NV_SATFINITE); every NaN becomes 0x7f.
TANDEM_HD inline uint8_t e4m3_encode(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7f;
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const float a = bits_float(u & 0x7fffffffu);
  if (a > 448.0f) return sign | 0x7e;
  const float min_normal = 0.015625f;  // 2^-6
  if (a < min_normal) {                // subnormal grid: multiples of 2^-9 (exact scaling)
    return sign | static_cast<uint8_t>(rintf(a * 512.0f));  // 8 rounds up to min normal 0x08
  }
  int exp = static_cast<int>((float_bits(a) >> 23) & 0xff) - 127;  // floor(log2 a), in [-6, 8]
  const float mant = bits_float((float_bits(a) & 0x807fffffu) | 0x3f800000u);  // a / 2^exp in [1,2)
  int m = static_cast<int>(rintf((mant - 1.0f) * 8.0f));
  if (m == 8) {
    m = 0;
    ++exp;
  }
  return sign | static_cast<uint8_t>(((exp + 7) << 3) | m);
}
TANDEM_HD inline float e4m3_decode(uint8_t c) {
  if ((c & 0x7f) == 0x7f) return bits_float(0x7fffffffu);
  const uint32_t sign = static_cast<uint32_t>(c & 0x80) << 24, exp = (c >> 3) & 0xf, m = c & 7;
  if (exp == 0) return bits_float(sign | float_bits(m * 0.001953125f /* 2^-9 */));
  return bits_float(sign | (exp + 120) << 23 | m << 20);  // (1 + m/8) 2^(exp - 7), rebiased
}

// ---- ue8m0: unsigned power-of-two scale 2^(c-127), 0xff is NaN. Encoding rounds |x| up
// (CUDA cudaRoundPosInf, __NV_SATFINITE): through bf16 rounded up, then the exponent, +1 when
// the bf16 mantissa is not zero.
TANDEM_HD inline uint8_t ue8m0_encode(float x) {
  const uint32_t ux = float_bits(x) & 0x7fffffffu;
  uint16_t b;
  if (ux > 0x7f800000u)
    b = 0x7fff;
  else if (ux < 0x7f800000u && (ux & 0xffffu))
    b = static_cast<uint16_t>((ux >> 16) + 1);
  else
    b = static_cast<uint16_t>(ux >> 16);
  uint8_t r = static_cast<uint8_t>(b >> 7);
  const uint16_t mag = b & 0x7fff;
  if ((b & 0x7f) && mag > 0x40 && mag < 0x7f80) ++r;
  if (mag <= 0x7f80 && r == 0xff) --r;
  return r;
}
TANDEM_HD inline float ue8m0_decode(uint8_t c) {
  if (c == 0xff) return bits_float(0x7fffffffu);
  return c == 0 ? bits_float(0x00400000u) /* 2^-127, a float subnormal */
                : bits_float(static_cast<uint32_t>(c) << 23);
}

// ---- The FP8 tile quantizer with a ue8m0 scale (DESIGN 5.5, the release's kernels):
// amax = max(max|x|, 1e-4); s = 2^ceil(log2(amax * fp32(1/448))), the ceil taken on the bits
// (the exponent, plus one when the mantissa is not zero); q = e4m3_rne(clamp(x / s, -448, 448)).
TANDEM_HD inline uint8_t fp8_tile_scale_code(float amax) {
  const uint32_t b = float_bits(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
  return static_cast<uint8_t>(((b >> 23) & 0xffu) + ((b & 0x7fffffu) != 0));
}
// NOTE: fmaxf drops a NaN, so NaN codes as -448: callers quantize finite values only (Engram's
// weights and rows are validated finite; the KV records clamp their own way, kv_record.hpp).
TANDEM_HD inline uint8_t fp8_tile_code(float x, float scale) {
  return e4m3_encode(fminf(fmaxf(x / scale, -448.0f), 448.0f));
}

// ---- fp4 e2m1: values +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, round to nearest even, saturating to 6.
TANDEM_HD inline float e2m1_decode(uint8_t c) {
  const int exp = (c >> 1) & 3, m = c & 1;
  const float mag = exp == 0 ? 0.5f * m : ldexpf(1.0f + 0.5f * m, exp - 1);
  return (c & 8) ? -mag : mag;
}
TANDEM_HD inline uint8_t e2m1_encode(float x) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 28) & 8u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7;  // CUDA maps NaN to +6 (0x7)
  const float a = bits_float(u & 0x7fffffffu);
  // Midpoints between neighbouring codes; ties go to the even code.
  const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t c = 0;
  while (c < 7 && (a > mid[c] || (a == mid[c] && (c & 1)))) ++c;
  return sign | c;
}

}  // namespace tandem
