#pragma once
// One warp writes one cache record (problem/kv_record.hpp): lane l quantizes its chunk of kQ
// values (16 of a main record, 4 of an index key), the tile's amax meets over the tile's lanes
// with xor shuffles, the codes go out in one vector store per lane (16 e4m3 = 16 B, 16 e2m1 =
// 8 B, 4 e4m3 = 4 B, 4 e2m1 = 2 B), the scales are gathered into 32-bit words by shuffles and
// stored by the first lanes, and the bf16 RoPE dims (V3.2, model1) two per lane.
#include "optimized/kernel.cuh"
#include "problem/kv_record.hpp"
#include "problem/kvcache.hpp"  // kKvRopeDims

namespace tandem::TANDEM_BACKEND_NS {

__device__ __forceinline__ float round_bf16(float v) { return bf16_decode(bf16_encode(v)); }

// RoPE on a lane's kDims / 32 contiguous values v (from dim `first`) of a row of kDims: the pairs
// among the last 64 dims turned by the row's cos [32] and sin [32] in cs, each result bf16.
template <int kDims>
__device__ __forceinline__ void rope_lane_pairs(float (&v)[kDims / kWarpSize], int first,
                                                const float* __restrict__ cs) {
  constexpr int kE = kDims / kWarpSize, kRope0 = kDims - kKvRopeDims;
  static_assert(kDims % kWarpSize == 0 && kE % 2 == 0 && kDims >= kKvRopeDims,
                "whole adjacent RoPE pairs per lane");
#pragma unroll
  for (int e = 0; e < kE; e += 2) {
    if (first + e < kRope0) continue;
    const int pair = (first + e - kRope0) / 2;
    const float c = ld(cs + pair, Traffic::coefficient),
                s = ld(cs + kKvRopeDims / 2 + pair, Traffic::coefficient);
    const float x0 = v[e], x1 = v[e + 1];
    v[e] = round_bf16(x0 * c - x1 * s);
    v[e + 1] = round_bf16(x0 * s + x1 * c);
  }
}

template <KvFormat F>
struct KvWarpRecord {
  static constexpr KvFormatInfo f = kv_format_info(F);
  static constexpr int kQ = f.quant >= 256 ? 16 : 4;  // values per lane
  static constexpr int kChunks = f.quant / kQ;
  static constexpr int kTileLanes = f.tile / kQ;
  static constexpr int kCodeBytes = f.code == KvCode::e4m3 ? kQ : kQ / 2;
  static constexpr int kScaleWords = f.scale_bytes() / 4;
  static_assert(f.quant % kQ == 0 && kChunks <= kWarpSize, "one chunk per lane covers the codes");
  static_assert(f.tile % kQ == 0 && (kTileLanes & (kTileLanes - 1)) == 0,
                "a tile is a power-of-two group of whole lanes");
  static_assert(f.scale_bytes() % 4 == 0 && kScaleWords <= kWarpSize, "scales are whole words");
  static_assert(f.rope == 0 || f.rope == 2 * kWarpSize, "two bf16 RoPE dims per lane");
  static_assert(f.scale == KvScale::fp32 ? kScaleWords == f.tiles() : true,
                "an fp32 scale is one word");
};

// Stores the record of `values` (shared memory, [dims], values of bf16) into slot `slot`, its
// bytes counted as `traffic` (the cache's; activations for quantized queries). Called by every
// lane of one warp.
template <KvFormat F>
__device__ void store_record_warp(const float* values, uint8_t* __restrict__ pool, int64_t slot,
                                  int64_t page_size, bool canonical_zero, Traffic traffic) {
  using R = KvWarpRecord<F>;
  constexpr KvFormatInfo f = R::f;
  const KvPageLayout at{f, page_size};
  const int lane = threadIdx.x % kWarpSize;
  const bool active = lane < R::kChunks;

  float v[R::kQ];
  float amax = 0.0f;
#pragma unroll
  for (int e = 0; e < R::kQ; ++e) {
    v[e] = active ? values[lane * R::kQ + e] : 0.0f;
    amax = kv_tile_amax(amax, v[e]);
  }
#pragma unroll
  for (int o = 1; o < R::kTileLanes; o *= 2)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const KvTileScale s = kv_tile_scale(f, amax);

  uint8_t code[R::kQ];
#pragma unroll
  for (int e = 0; e < R::kQ; ++e) code[e] = kv_element_code(f, v[e], s.value, canonical_zero);
  uint32_t word[4] = {0, 0, 0, 0};  // the lane's code bytes, little-endian
#pragma unroll
  for (int e = 0; e < R::kQ; ++e) {
    if constexpr (f.code == KvCode::e4m3)
      word[e / 4] |= uint32_t(code[e]) << (8 * (e % 4));
    else
      word[e / 8] |= uint32_t(code[e]) << (4 * (e % 8));  // the even element in the low nibble
  }
  uint8_t* codes = pool + at.code_at(slot) + lane * R::kCodeBytes;
  if (active) {
    if constexpr (R::kCodeBytes == 16)
      st(reinterpret_cast<uint4*>(codes), uint4{word[0], word[1], word[2], word[3]}, traffic);
    else if constexpr (R::kCodeBytes == 8)
      st(reinterpret_cast<uint2*>(codes), uint2{word[0], word[1]}, traffic);
    else if constexpr (R::kCodeBytes == 4)
      st(reinterpret_cast<uint32_t*>(codes), word[0], traffic);
    else
      st(reinterpret_cast<uint16_t*>(codes), uint16_t(word[0]), traffic);
  }

  // Scale word w: fp32 scale of tile w, or the one-byte scales of tiles 4w..4w+3 (0 past the
  // last tile: model1's pad byte). Every lane takes part in every shuffle.
  uint32_t scale_word = 0;
  if constexpr (f.scale == KvScale::fp32) {
    scale_word = __shfl_sync(0xffffffffu, s.bits, (lane * R::kTileLanes) % kWarpSize);
  } else {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int tile = 4 * lane + b;
      const uint32_t bits = __shfl_sync(0xffffffffu, s.bits, (tile * R::kTileLanes) % kWarpSize);
      if (tile < f.tiles()) scale_word |= (bits & 0xffu) << (8 * b);
    }
  }
  if (lane < R::kScaleWords)
    st(reinterpret_cast<uint32_t*>(pool + at.scale_at(slot)) + lane, scale_word, traffic);

  if constexpr (f.rope > 0) {
    const uint32_t pair = uint32_t(bf16_encode(values[f.quant + 2 * lane])) |
                          uint32_t(bf16_encode(values[f.quant + 2 * lane + 1])) << 16;
    st(reinterpret_cast<uint32_t*>(pool + at.rope_at(slot)) + lane, pair, traffic);
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
