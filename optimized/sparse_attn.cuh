#pragma once
// sparse_decode_attn: grid (tokens, head groups of 4). A block stages its four heads' queries in
// shared memory; each warp takes the token's indices in turn (window slots, then compressed
// entries through the page table; -1 skipped), dequantizes the record (16 dims per lane: one
// 16- or 8-byte load of codes, the scale words loaded once and shuffled; model1's RoPE dims as
// bf16) and keeps, per head, an online softmax over the records it saw (running max, sum, and
// the lane's 16 dims of the weighted sum). The warps' partials are merged in warp order (the
// result does not depend on the schedule), the sink joins the denominator, the output's RoPE
// dims are turned back by the token's position, and lse = log sum e^s (+inf with no record).
// rope_queries: one warp per (token, head) row: bf16, then RoPE on the last 64 dims (the
// attention's and the indexer's queries, before they are read or quantized).
#include "optimized/kernel.cuh"
#include "optimized/kv_record.cuh"  // round_bf16, rope_lane_pairs
#include "problem/kv_record.hpp"
#include "problem/sparse_attn.hpp"

namespace tandem::TANDEM_BACKEND_NS {

inline constexpr int kAttnDims = kKvMainDims;
inline constexpr int kAttnLaneDims = kAttnDims / kWarpSize;  // 16
inline constexpr int kAttnGroup = kSparseAttnHeadGroup;

// Lane l's dims [16 l, 16 l + 16) of the record in `slot` (every lane of the warp calls).
template <KvFormat F>
__device__ __forceinline__ void dequantize_main_record_warp(const uint8_t* __restrict__ pool,
                                                            const KvPageLayout& at, int64_t slot,
                                                            float (&v)[kAttnLaneDims]) {
  constexpr KvFormatInfo f = kv_format_info(F);
  static_assert(f.dims() == kAttnDims && f.quant % kAttnLaneDims == 0 && f.tile % 16 == 0,
                "main records: 512 dims, whole lanes of codes, tiles of whole lanes");
  constexpr int kScaleWords = f.scale_bytes() / 4;
  const int lane = threadIdx.x % kWarpSize, first = lane * kAttnLaneDims;
  uint32_t word = lane < kScaleWords
                      ? ld(reinterpret_cast<const uint32_t*>(pool + at.scale_at(slot)) + lane,
                           Traffic::kv_cache)
                      : 0u;
  const int tile = first / f.tile;  // past the codes: unused, a lane in range all the same
  word = __shfl_sync(0xffffffffu, word, (tile * f.scale_unit() / 4) % kWarpSize);
  if (first >= f.quant) {  // model1's bf16 RoPE dims
    const uint8_t* rope = pool + at.rope_at(slot) + 2 * (first - f.quant);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float part[8];
      Pack<bf16>::load(reinterpret_cast<const bf16*>(rope) + 8 * half, part, Traffic::kv_cache);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[8 * half + e] = part[e];
    }
    return;
  }
  const uint32_t bits = f.scale == KvScale::fp32 ? word : (word >> (8 * (tile % 4))) & 0xffu;
  const float s = kv_scale_value(f, bits);
  uint32_t w[4];
  if constexpr (f.code == KvCode::e4m3) {
    const uint4 c =
        ld(reinterpret_cast<const uint4*>(pool + at.code_at(slot) + first), Traffic::kv_cache);
    w[0] = c.x, w[1] = c.y, w[2] = c.z, w[3] = c.w;
  } else {
    const uint2 c =
        ld(reinterpret_cast<const uint2*>(pool + at.code_at(slot) + first / 2), Traffic::kv_cache);
    w[0] = c.x, w[1] = c.y, w[2] = w[3] = 0;
  }
#pragma unroll
  for (int e = 0; e < kAttnLaneDims; ++e) {
    const uint8_t code = f.code == KvCode::e4m3 ? uint8_t((w[e / 4] >> (8 * (e % 4))) & 0xff)
                                                : uint8_t((w[e / 8] >> (4 * (e % 8))) & 0xf);
    v[e] = kv_element_value(f, code) * s;
  }
}

// One head's running softmax over a warp's records (the lane's 16 dims of the weighted sum).
struct AttnPartial {
  float m = -INFINITY, l = 0.0f;
  float acc[kAttnLaneDims] = {};
  __device__ __forceinline__ void add(float s, const float (&v)[kAttnLaneDims]) {
    if (s > m) {
      const float r = expf(m - s);
      l *= r;
#pragma unroll
      for (int e = 0; e < kAttnLaneDims; ++e) acc[e] *= r;
      m = s;
    }
    const float p = expf(s - m);
    l += p;
#pragma unroll
    for (int e = 0; e < kAttnLaneDims; ++e) acc[e] += p * v[e];
  }
};

// q: [T, heads, 512] bf16; sinks: [heads]; rope: [T, 64] (cos, sin of the token's position);
// window_idx: [T, W] ring slots; comp_idx: [T, K] entries; o: [T, heads, 512] bf16; lse: [T,
// heads]. Dynamic shared memory: [2 * 4 * 512 + 2 * 4 * warps + 3 * 4] floats.
template <KvFormat FW, KvFormat FC>
__global__ void sparse_decode_attn(const bf16* __restrict__ q, const float* __restrict__ sinks,
                                   const float* __restrict__ rope,
                                   const uint8_t* __restrict__ window_pool, int64_t window_page,
                                   const int32_t* __restrict__ window_idx, int W,
                                   const uint8_t* __restrict__ comp_pool, int64_t comp_page,
                                   const int32_t* __restrict__ page_table,
                                   const int32_t* __restrict__ comp_idx, int K, int heads,
                                   bf16* __restrict__ o, float* __restrict__ lse) {
  TANDEM_DYNAMIC_SHARED(float, smem);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  float* qs = smem;                             // [4, 512]
  float* merged = qs + kAttnGroup * kAttnDims;  // [4, 512]
  float* ms = merged + kAttnGroup * kAttnDims;  // [warps, 4]
  float* ls = ms + warps * kAttnGroup;          // [warps, 4]
  float* sink = ls + warps * kAttnGroup;        // [4]
  float* head_m = sink + kAttnGroup;            // [4] the merged max
  float* head_l = head_m + kAttnGroup;          // [4] the merged sum
  const int64_t t = blockIdx.x;
  const int g0 = blockIdx.y * kAttnGroup;
  const bf16* qg = q + (t * heads + g0) * kAttnDims;
  for (int i = threadIdx.x * 8; i < kAttnGroup * kAttnDims; i += blockDim.x * 8) {
    float part[8];
    Pack<bf16>::load(qg + i, part, Traffic::activation);
#pragma unroll
    for (int e = 0; e < 8; ++e) qs[i + e] = part[e];
  }
  if (threadIdx.x < kAttnGroup) sink[threadIdx.x] = ld(sinks + g0 + threadIdx.x, Traffic::weight);
  __syncthreads();

  const KvPageLayout w_at{kv_format_info(FW), window_page}, c_at{kv_format_info(FC), comp_page};
  const float scale = 0.044194173824159216f;  // 1 / sqrt(512)
  AttnPartial part[kAttnGroup];
  for (int i = warp; i < W + K; i += warps) {
    int32_t idx = 0;
    if (lane == 0)
      idx = i < W ? ld(window_idx + t * W + i, Traffic::coefficient)
                  : ld(comp_idx + t * K + (i - W), Traffic::coefficient);
    idx = __shfl_sync(0xffffffffu, idx, 0);
    if (idx == -1) continue;
    float v[kAttnLaneDims];
    if (i < W) {
      dequantize_main_record_warp<FW>(window_pool, w_at, idx, v);
    } else {
      int32_t page = lane == 0 ? ld(page_table + idx / comp_page, Traffic::coefficient) : 0;
      page = __shfl_sync(0xffffffffu, page, 0);
      dequantize_main_record_warp<FC>(comp_pool, c_at, int64_t(page) * comp_page + idx % comp_page,
                                      v);
    }
#pragma unroll
    for (int g = 0; g < kAttnGroup; ++g) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < kAttnLaneDims; ++e)
        dot += qs[g * kAttnDims + lane * kAttnLaneDims + e] * v[e];
      part[g].add(warp_sum(dot) * scale, v);
    }
  }
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < kAttnGroup; ++g)
      ms[warp * kAttnGroup + g] = part[g].m, ls[warp * kAttnGroup + g] = part[g].l;
  __syncthreads();
  // Merge the warps' partials in warp order: a head's max and sum (thread g), then the weighted
  // sums warp by warp.
  if (threadIdx.x < kAttnGroup) {
    const int g = threadIdx.x;
    float m = -INFINITY, l = 0.0f;
    for (int w = 0; w < warps; ++w) m = fmaxf(m, ms[w * kAttnGroup + g]);
    for (int w = 0; w < warps; ++w)
      if (ms[w * kAttnGroup + g] != -INFINITY)
        l += ls[w * kAttnGroup + g] * expf(ms[w * kAttnGroup + g] - m);
    head_m[g] = m, head_l[g] = l;
  }
  __syncthreads();
  for (int w = 0; w < warps; ++w) {
    if (warp == w)
#pragma unroll
      for (int g = 0; g < kAttnGroup; ++g) {
        const float r = part[g].m == -INFINITY ? 0.0f : expf(part[g].m - head_m[g]);
#pragma unroll
        for (int e = 0; e < kAttnLaneDims; ++e) {
          float& dst = merged[g * kAttnDims + lane * kAttnLaneDims + e];
          dst = (w == 0 ? 0.0f : dst) + part[g].acc[e] * r;
        }
      }
    __syncthreads();
  }
  // Normalise with the sink, turn the RoPE dims back, store: a thread per pair of dims.
  const float* cs = rope + t * kKvRopeDims;
  for (int p = threadIdx.x; p < kAttnGroup * kAttnDims / 2; p += blockDim.x) {
    const int g = p / (kAttnDims / 2), d0 = 2 * (p % (kAttnDims / 2));
    const float m = head_m[g], l = head_l[g];
    float x0 = 0.0f, x1 = 0.0f;
    if (m != -INFINITY) {
      const float top = fmaxf(m, sink[g]), r = expf(m - top);
      const float den = l * r + (sink[g] == -INFINITY ? 0.0f : expf(sink[g] - top));
      x0 = merged[g * kAttnDims + d0] * r / den, x1 = merged[g * kAttnDims + d0 + 1] * r / den;
      if (d0 >= kAttnDims - kKvRopeDims) {
        const int pair = (d0 - (kAttnDims - kKvRopeDims)) / 2;
        const float c = ld(cs + pair, Traffic::coefficient),
                    s = ld(cs + 32 + pair, Traffic::coefficient);
        const float y0 = x0 * c + x1 * s, y1 = x1 * c - x0 * s;
        x0 = y0, x1 = y1;
      }
    }
    bf16* dst = o + (t * heads + g0 + g) * kAttnDims + d0;
    st(reinterpret_cast<uint32_t*>(dst),
       uint32_t(bf16_encode(x0)) | uint32_t(bf16_encode(x1)) << 16, Traffic::activation);
  }
  if (threadIdx.x < kAttnGroup) {
    const int g = threadIdx.x;
    st(lse + t * heads + g0 + g, head_m[g] == -INFINITY ? INFINITY : head_m[g] + logf(head_l[g]),
       Traffic::activation);
  }
}

// ---------------------------------------------------------------- the queries' RoPE
// q: [rows, kDims] f32, row r = (t, h) with heads rows per token; rope: [T, 64] (cos, sin of
// token t's position); out: [rows, kDims] bf16. A warp per row, kDims / 32 contiguous values per
// lane (16-byte loads).
template <int kDims>
__global__ void rope_queries(const float* __restrict__ q, const float* __restrict__ rope,
                             int64_t rows, int heads, bf16* __restrict__ out) {
  constexpr int kE = kDims / kWarpSize;
  static_assert(kE % 4 == 0, "a lane's values are whole 16-byte float loads");
  const int warps = blockDim.x / kWarpSize, first = (threadIdx.x % kWarpSize) * kE;
  for (int64_t r = int64_t(blockIdx.x) * warps + threadIdx.x / kWarpSize; r < rows;
       r += int64_t(gridDim.x) * warps) {
    float v[kE];
    load_floats<kE>(q + r * kDims + first, v, Traffic::activation);
#pragma unroll
    for (int e = 0; e < kE; ++e) v[e] = round_bf16(v[e]);
    rope_lane_pairs<kDims>(v, first, rope + r / heads * kKvRopeDims);
#pragma unroll
    for (int e = 0; e < kE; ++e) st(out + r * kDims + first + e, bf16(v[e]), Traffic::activation);
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
