#pragma once
// The KV cache's record formats (DESIGN 5.5) as data: sizes, where a record's codes and scales
// sit in a page, and the release's tile quantizers, bit for bit. Header-only and __host__
// __device__: the reference encodes a record element by element with these, the kernels a warp
// at a time (optimized/kv_record.cuh); the layout and the tiling are written twice, the
// per-element codecs once (core/dtype.hpp, checked exhaustively there).
//
// Non-finite values (the stated rule, the same in reference and kernels): a tile's amax ignores
// NaN (fmaxf) and saturates at FLT_MAX, so a tile holding +-Inf takes the largest finite scale;
// the clamp to the format's range passes NaN through, so NaN encodes as the e4m3 NaN code (sign
// kept) and as e2m1 0x7 (+6: e2m1 has no NaN; CUDA's conversion does the same); +-Inf saturates
// to +-448 or +-6; the tile's finite elements are encoded against that scale.
#include <cfloat>
#include <cstdint>

#include "core/dtype.hpp"
#include "core/hd.hpp"

namespace tandem {

enum class KvFormat : int {
  v32_fp8 = 0,     // V3.2 DSA main record: 512 e4m3 + 4 fp32 scales (tile 128) + 64 bf16 RoPE
  idx_fp8 = 1,     // V3.2 / Hopper index key: 128 e4m3 + 1 fp32 scale
  model1 = 2,      // V4: 448 e4m3 + 64 bf16 RoPE (576 B) | 7 ue8m0 (tile 64) + 1 zero pad (8 B)
  v41_window = 3,  // V4.1 window: 512 e4m3 (RoPE dims included) + 16 ue8m0 (tile 32)
  v41_fp4 = 4,     // V4.1 compressed: 512 e2m1 (256 B) + 32 e4m3 scales (tile 16)
  idx_mxfp4 = 5,   // index key: 128 e2m1 (64 B) + 4 ue8m0 (tile 32)
};
inline constexpr int kKvFormats = 6;

enum class KvScale : int { fp32, ue8m0, e4m3 };
enum class KvCode : int { e4m3, e2m1 };

// One format's geometry. A record holds `quant` quantized values then `rope` bf16 values (the
// RoPE dims kept unquantized), its data part (codes, then the bf16 dims) and its scale part (one
// scale per `tile` quantized values, then zero pad bytes).
struct KvFormatInfo {
  const char* name;
  int quant, rope, tile;
  KvCode code;
  KvScale scale;
  int pad;          // zero bytes after the scales
  bool split_page;  // struct of arrays in a page: all data parts, then all scale parts
  int normed;       // the leading dims the store kernels' RMSNorm covers (V3.2: the latent only)

  constexpr int dims() const { return quant + rope; }
  constexpr int tiles() const { return quant / tile; }
  constexpr int code_bytes() const { return code == KvCode::e4m3 ? quant : quant / 2; }
  constexpr int data_bytes() const { return code_bytes() + 2 * rope; }
  constexpr int scale_unit() const { return scale == KvScale::fp32 ? 4 : 1; }
  constexpr int scale_bytes() const { return tiles() * scale_unit() + pad; }
  constexpr int record_bytes() const { return data_bytes() + scale_bytes(); }
};

TANDEM_HD constexpr KvFormatInfo kv_format_info(KvFormat f) {
  switch (f) {
    case KvFormat::v32_fp8:
      return {"v32_fp8", 512, 64, 128, KvCode::e4m3, KvScale::fp32, 0, false, 512};
    case KvFormat::idx_fp8:
      return {"idx_fp8", 128, 0, 128, KvCode::e4m3, KvScale::fp32, 0, false, 128};
    case KvFormat::model1:
      return {"model1", 448, 64, 64, KvCode::e4m3, KvScale::ue8m0, 1, true, 512};
    case KvFormat::v41_window:
      return {"v41_window", 512, 0, 32, KvCode::e4m3, KvScale::ue8m0, 0, false, 512};
    case KvFormat::v41_fp4:
      return {"v41_fp4", 512, 0, 16, KvCode::e2m1, KvScale::e4m3, 0, false, 512};
    case KvFormat::idx_mxfp4:
    default:
      return {"idx_mxfp4", 128, 0, 32, KvCode::e2m1, KvScale::ue8m0, 0, false, 128};
  }
}
inline const char* kv_format_name(KvFormat f) { return kv_format_info(f).name; }

// model1's pages are padded to a whole number of 576-byte data rows (FlashMLA's MODEL1 layout).
inline constexpr int64_t kModel1PageAlign = 576;

// Where cache slot s (page s / page_size, then its place in the page) keeps its codes, its bf16
// RoPE dims and its scales, in bytes from the pool's start. Records are contiguous (codes,
// then, V3.2, the scales and the RoPE dims as FlashMLA's 656-byte record; else the scales) except
// model1's pages: every slot's data row (codes, RoPE dims: 576 B), then every slot's 8-byte
// scale row, the page padded to a multiple of 576.
struct KvPageLayout {
  KvFormatInfo f;
  int64_t page_size;

  TANDEM_HD constexpr int64_t page_bytes() const {
    const int64_t used = page_size * f.record_bytes();
    return f.split_page ? (used + kModel1PageAlign - 1) / kModel1PageAlign * kModel1PageAlign
                        : used;
  }
  TANDEM_HD constexpr int64_t code_at(int64_t s) const {
    return s / page_size * page_bytes() +
           s % page_size * (f.split_page ? f.data_bytes() : f.record_bytes());
  }
  TANDEM_HD constexpr int64_t scale_at(int64_t s) const {
    return f.split_page ? s / page_size * page_bytes() + page_size * f.data_bytes() +
                              s % page_size * f.scale_bytes()
                        : code_at(s) + f.code_bytes();
  }
  TANDEM_HD constexpr int64_t rope_at(int64_t s) const {
    return f.split_page ? code_at(s) + f.code_bytes() : scale_at(s) + f.scale_bytes();
  }
};

// Slot s's record as one row of record_bytes(): its bytes in order (model1: the data row, then
// the scale row).
inline void copy_record_out(const KvPageLayout& at, const uint8_t* pool, int64_t s, uint8_t* row) {
  const KvFormatInfo& f = at.f;
  const int first = f.split_page ? f.data_bytes() : f.record_bytes();
  for (int i = 0; i < first; ++i) row[i] = pool[at.code_at(s) + i];
  for (int i = first; i < f.record_bytes(); ++i) row[i] = pool[at.scale_at(s) + i - first];
}
// The inverse: a row of record_bytes() into slot s.
inline void copy_record_in(const KvPageLayout& at, const uint8_t* row, int64_t s, uint8_t* pool) {
  const KvFormatInfo& f = at.f;
  const int first = f.split_page ? f.data_bytes() : f.record_bytes();
  for (int i = 0; i < first; ++i) pool[at.code_at(s) + i] = row[i];
  for (int i = first; i < f.record_bytes(); ++i) pool[at.scale_at(s) + i - first] = row[i];
}

// ---- the tile quantizers (DESIGN 5.5). amax: the tile's largest |x| (NaN ignored, saturated at
// FLT_MAX: see the rule above).
TANDEM_HD inline float kv_tile_amax(float amax_so_far, float x) {
  return fminf(fmaxf(amax_so_far, fabsf(x)), FLT_MAX);
}

// 2^ceil(log2(v)) as a ue8m0 code, the ceil taken on the bits (exponent, +1 when the mantissa is
// not zero); v is a positive normal float. The biggest code is 254 (2^127): never the NaN 0xff.
TANDEM_HD inline uint8_t ue8m0_ceil_code(float v) {
  const uint32_t b = float_bits(v);
  const uint32_t c = ((b >> 23) & 0xffu) + ((b & 0x7fffffu) != 0);
  return static_cast<uint8_t>(c > 254u ? 254u : c);
}

// The scale of a tile with amax `amax`, as stored (`bits`: fp32 bits, or a one-byte code) and as
// the value the tile's elements are divided by.
struct KvTileScale {
  uint32_t bits;
  float value;
};
TANDEM_HD inline KvTileScale kv_tile_scale(const KvFormatInfo& f, float amax) {
  if (f.code == KvCode::e4m3) {
    if (f.scale == KvScale::fp32) {  // no scale format: the unrounded amax / 448
      const float s = fmaxf(amax, 1e-4f) * (1.0f / 448.0f);
      return {float_bits(s), s};
    }
    const uint8_t c = ue8m0_ceil_code(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
    return {c, ue8m0_decode(c)};
  }
  if (f.scale == KvScale::ue8m0) {  // MXFP4
    const uint8_t c = ue8m0_ceil_code(fmaxf(amax, 6.0f * 1.17549435e-38f) * (1.0f / 6.0f));
    return {c, ue8m0_decode(c)};
  }
  // FP4 with an e4m3 scale: e4m3_rne(amax / 6), a division; not a power of two.
  const uint8_t c = e4m3_encode(fmaxf(amax, 6.0f * 0.001953125f) / 6.0f);
  return {c, e4m3_decode(c)};
}

// One element's code against its tile's scale: x / s (a true division) clamped to the format's
// range (NaN passes), rounded to nearest even. `canonical_zero` turns a -0 code into +0.
TANDEM_HD inline uint8_t kv_element_code(const KvFormatInfo& f, float x, float scale,
                                         bool canonical_zero) {
  const float hi = f.code == KvCode::e4m3 ? 448.0f : 6.0f;
  float v = x / scale;
  v = v > hi ? hi : (v < -hi ? -hi : v);
  if (f.code == KvCode::e4m3) {
    const uint8_t c = e4m3_encode(v);
    return canonical_zero && c == 0x80 ? uint8_t{0} : c;
  }
  const uint8_t c = e2m1_encode(v);
  return canonical_zero && c == 0x8 ? uint8_t{0} : c;
}
TANDEM_HD inline float kv_element_value(const KvFormatInfo& f, uint8_t code) {
  return f.code == KvCode::e4m3 ? e4m3_decode(code) : e2m1_decode(code);
}
TANDEM_HD inline float kv_scale_value(const KvFormatInfo& f, uint32_t bits) {
  if (f.scale == KvScale::fp32) return bits_float(bits);
  return f.scale == KvScale::ue8m0 ? ue8m0_decode(uint8_t(bits)) : e4m3_decode(uint8_t(bits));
}

}  // namespace tandem
