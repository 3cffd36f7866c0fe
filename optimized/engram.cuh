#pragma once
// Engram kernels (DESIGN 5.2). One block per token.
// engram_hash_gather: the token's 24 addresses (one thread per (order, head)), then one warp per
// row gathers its 264 bytes (lane: 8 e4m3 codes as one 8-byte load; lane 0: the 8 ue8m0 scales,
// shared by shuffle) and writes 256 dequantised floats.
// engram_gate: kv = Wkv e (one warp per output row, e staged in shared memory; as the release's
// FP8 linear, e is first quantized per B values in shared memory and the weight rows are e4m3
// codes with a ue8m0 scale per B x B block), the 4 per-stream gates from one block reduction,
// then h_i += gate_i * value (h read again rather than staged: V4-Pro's width would not fit).
#include "core/engram_config.hpp"  // kEngramGateStaticShared
#include "optimized/kernel.cuh"

// Inside the backend namespace: emu and cuda builds of the same source must not share symbols.
namespace tandem::TANDEM_BACKEND_NS {

inline constexpr int kEngramHeadDim = 256;  // values per row: 32 lanes x 8
inline constexpr int kEngramScales = kEngramHeadDim / 32;
inline constexpr int kEngramRowBytes = kEngramHeadDim + kEngramScales;
inline constexpr int kEngramMaxOrder = 4;
inline constexpr int kEngramMaxLookups = 24;
inline constexpr int kEngramWindow = kEngramMaxOrder;  // ids t-3..t
static_assert(kEngramHeadDim == kWarpSize * 8, "a lane dequantises 8 values");
static_assert(kEngramRowBytes % 8 == 0, "rows start 8-byte aligned for the lanes' 8-byte loads");
inline constexpr int kFp8CodesPerLane = 16;  // one 16-byte load of e4m3 codes
inline constexpr int kFp8MinBlock = 32;
static_assert(kEngramHeadDim % kFp8CodesPerLane == 0,
              "a lane's 16 codes never straddle the end of a row (E = lookups x 256)");
static_assert(kFp8MinBlock % kFp8CodesPerLane == 0 && kFp8MinBlock % kWarpSize == 0,
              "a lane's 16 codes share one weight block; a warp quantizes whole input tiles");

struct EngramHashParams {
  int64_t multipliers[kEngramMaxOrder];
  int64_t primes[kEngramMaxLookups];
  int64_t offsets[kEngramMaxLookups];
  int64_t pad;  // the compressed pad id
  int max_order, heads;
  bool skip_markers;  // no lookup at negative ids (else the all-pad n-gram, as the release)
  // The rows come prefetched (DESIGN 5.2: the host computes the chunk's addresses from the ids
  // and copies their rows ahead): `table` is [T, lookups] rows in lookup order, not the table.
  bool prefetched;
};

// ids: [3 + T] compressed ids, the chunk's history first (kEngramDead where there is none).
// table: the layer's table [rows, 264 B], or with p.prefetched the chunk's rows [T, lookups].
// addresses: [T, lookups]; rows: [T, lookups, 256] floats.
__global__ void engram_hash_gather(const int64_t* __restrict__ ids, EngramHashParams p,
                                   const uint8_t* __restrict__ table,
                                   int64_t* __restrict__ addresses, float* __restrict__ rows) {
  __shared__ int64_t window[kEngramWindow];  // c_{t-3} .. c_t
  __shared__ int64_t address[kEngramMaxLookups];
  const int64_t t = blockIdx.x;
  const int lookups = (p.max_order - 1) * p.heads;
  if (threadIdx.x < kEngramWindow)
    window[threadIdx.x] = ld(ids + t + threadIdx.x, Traffic::activation);
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < lookups) {
    const int k = 2 + threadIdx.x / p.heads;  // order
    int64_t row = -1;
    if (!p.skip_markers || window[kEngramWindow - 1] >= 0) {
      bool blocked = false;
      int64_t h = 0;
      for (int i = 0; i < k; ++i) {  // look back from t; a negative id blocks for good
        const int64_t id = window[kEngramWindow - 1 - i];
        blocked = blocked || id < 0;
        const int64_t term = (blocked ? p.pad : id) * p.multipliers[i];
        h = i == 0 ? term : h ^ term;
      }
      row = p.offsets[threadIdx.x] + h % p.primes[threadIdx.x];
    }
    address[threadIdx.x] = row;
    st(addresses + t * lookups + threadIdx.x, row, Traffic::coefficient);
  }
  __syncthreads();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int l = warp; l < lookups; l += blockDim.x / kWarpSize) {
    const int64_t row = address[l];
    float v[8] = {};
    if (row >= 0) {
      const uint8_t* r = table + (p.prefetched ? t * lookups + l : row) * kEngramRowBytes;
      const uint2 codes = ld(reinterpret_cast<const uint2*>(r) + lane, Traffic::weight);
      uint2 scales = {0, 0};
      if (lane == 0)
        scales = ld(reinterpret_cast<const uint2*>(r + kEngramHeadDim), Traffic::weight);
      scales.x = __shfl_sync(0xffffffffu, scales.x, 0);
      scales.y = __shfl_sync(0xffffffffu, scales.y, 0);
      const int group = lane / 4;  // one scale per 32 values = 4 lanes x 8
      const unsigned word = group < 4 ? scales.x : scales.y;
      const float scale = ue8m0_decode(static_cast<uint8_t>(word >> (8 * (group % 4))));
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const unsigned w = i < 4 ? codes.x : codes.y;
        v[i] = e4m3_decode(static_cast<uint8_t>(w >> (8 * (i % 4)))) * scale;
      }
    }
    float* out = rows + (t * lookups + l) * kEngramHeadDim + lane * 8;
    float lo[4] = {v[0], v[1], v[2], v[3]}, hi[4] = {v[4], v[5], v[6], v[7]};
    Pack<float>::store(out, lo, Traffic::activation);
    Pack<float>::store(out + 4, hi, Traffic::activation);
  }
}

// Wkv [5d, E]: float values (block == 0), or e4m3 codes with ue8m0 scales
// [ceil(5d / block), E / block] (block 32 or 128).
struct EngramWkv {
  const float* values;
  const uint8_t* codes;
  const uint8_t* scales;
  int block;
};

// Quantizes x[0..E) in place per `block` values with DESIGN 5.5's tile quantizer (one warp per
// tile, block / 32 values per lane): x keeps the e4m3 values, x_scale[tile] the tile's scale.
__device__ __forceinline__ void quantize_tiles_fp8(float* x, float* x_scale, int E, int block) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int per_lane = block / kWarpSize;
  for (int tile = warp; tile < E / block; tile += blockDim.x / kWarpSize) {
    float* mine = x + tile * block + lane * per_lane;
    float amax = 0.0f;
    for (int k = 0; k < per_lane; ++k) amax = fmaxf(amax, fabsf(mine[k]));
    const float scale = ue8m0_decode(fp8_tile_scale_code(warp_max(amax)));
    for (int k = 0; k < per_lane; ++k) mine[k] = e4m3_decode(fp8_tile_code(mine[k], scale));
    if (lane == 0) x_scale[tile] = scale;
  }
}

// One warp's dot of FP8 weight row `codes` [E] (its scales: `scales` [E / block]) with the
// quantized input (e4m3 values x, tile scales x_scale). A lane takes 16 codes per 16-byte load
// (a warp covers 512 codes per pass; E = lookups x 256 may end on a half pass); the first lane
// of each weight block loads the block's scale byte and shuffles it to the rest.
__device__ __forceinline__ float warp_row_dot_fp8(const uint8_t* __restrict__ codes,
                                                  const uint8_t* __restrict__ scales,
                                                  const float* x, const float* x_scale, int E,
                                                  int block) {
  const int lane = threadIdx.x % kWarpSize;
  const int leader = lane - lane % (block / kFp8CodesPerLane);
  float sum = 0.0f;
  for (int base = 0; base < E; base += kWarpSize * kFp8CodesPerLane) {
    const int i = base + lane * kFp8CodesPerLane;
    uint4 c = {0, 0, 0, 0};
    unsigned s = 0;
    if (i < E) c = ld(reinterpret_cast<const uint4*>(codes + i), Traffic::weight);
    if (i < E && lane == leader) s = ld(scales + i / block, Traffic::weight);
    // Every lane shuffles (a lane past E with its leader, also past E); only lanes inside add.
    const float w_scale = ue8m0_decode(static_cast<uint8_t>(__shfl_sync(0xffffffffu, s, leader)));
    if (i >= E) continue;
    const unsigned words[4] = {c.x, c.y, c.z, c.w};
    float xs[kFp8CodesPerLane];
    lds_floats(x + i, xs);  // x is the dynamic shared memory's start, i a multiple of 16
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < kFp8CodesPerLane; ++k)
      part += e4m3_decode(static_cast<uint8_t>(words[k / 4] >> (8 * (k % 4)))) * xs[k];
    sum += part * (w_scale * x_scale[i / block]);
  }
  return warp_sum(sum);
}

// h: [T, 4, d] (Act); ids: [T] (negative: gate 0); rows: [T, E] floats, E = lookups * 256;
// wkv: [5d, E]; gate_w: [4, d]; gates: [T, 4]; h_out: [T, 4, d].
// Dynamic shared memory: engram_gate_shared_bytes(E, d). h is read twice (the gate's sums, then
// the update) rather than staged: staging it would take 4d more floats (V4-Pro's d = 7168 would
// not fit a block).
template <class Act>
__global__ void engram_gate(const Act* __restrict__ h, const int64_t* __restrict__ ids,
                            const float* __restrict__ rows, EngramWkv wkv,
                            const float* __restrict__ gate_w, int d, int E, float eps,
                            float* __restrict__ gates, Act* __restrict__ h_out) {
  using P = Pack<Act>;
  constexpr int kSums = 12;  // per stream: sum(h w key), sum(h^2), sum(key^2)
  __shared__ float scratch[kMaxWarps * kSums];
  __shared__ float gate[4];
  __shared__ bool image;
  static_assert(sizeof(scratch) + sizeof(gate) + sizeof(image) <= kEngramGateStaticShared,
                "the config's width bound reserves kEngramGateStaticShared beside the dynamic");
  TANDEM_DYNAMIC_SHARED(float, smem);
  float* e = smem;                    // [E]
  float* kv = smem + E;               // [5d]
  float* e_scale = smem + E + 5 * d;  // [E / block]: FP8 input tile scales
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) image = ld(ids + t, Traffic::activation) < 0;
  for (int i = threadIdx.x * 4; i < E; i += blockDim.x * 4) {
    float v[4];
    Pack<float>::load(rows + t * E + i, v, Traffic::activation);
#pragma unroll
    for (int k = 0; k < 4; ++k) e[i + k] = v[k];
  }
  __syncthreads();
  if (wkv.block) {
    quantize_tiles_fp8(e, e_scale, E, wkv.block);
    __syncthreads();
  }
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int r = warp; r < 5 * d; r += blockDim.x / kWarpSize) {
    const float sum =
        wkv.block
            ? warp_row_dot_fp8(wkv.codes + static_cast<size_t>(r) * E,
                               wkv.scales + static_cast<size_t>(r / wkv.block) * (E / wkv.block), e,
                               e_scale, E, wkv.block)
            : warp_row_dot(wkv.values + static_cast<size_t>(r) * E, e, E);
    if (lane == 0) kv[r] = sum;
  }
  __syncthreads();
  float acc[kSums] = {};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    for (int n = threadIdx.x * P::N; n < d; n += blockDim.x * P::N) {
      float hv[P::N], wv[P::N];
      P::load(h + (t * 4 + s) * d + n, hv, Traffic::activation);
      load_floats<P::N>(gate_w + s * d + n, wv, Traffic::weight);
#pragma unroll
      for (int k = 0; k < P::N; ++k) {
        const float key = kv[s * d + n + k];
        acc[3 * s] += hv[k] * wv[k] * key;
        acc[3 * s + 1] += hv[k] * hv[k];
        acc[3 * s + 2] += key * key;
      }
    }
  }
  block_sum(acc, scratch);
  if (threadIdx.x < 4) {
    const int s = threadIdx.x;
    float hwk = 0.0f, hh = 0.0f, kk = 0.0f;  // NOTE: selected by unrolled compares, so acc stays
#pragma unroll                               // in registers (acc[3 * s] would be local memory)
    for (int q = 0; q < 4; ++q)
      if (q == s) hwk = acc[3 * q], hh = acc[3 * q + 1], kk = acc[3 * q + 2];
    const float dot =
        hwk * rsqrtf(hh / d + eps) * rsqrtf(kk / d + eps) / sqrtf(static_cast<float>(d));
    // copysign as the release: dot = +0 gives sigmoid(+1e-3), not 0.5.
    const float z = copysignf(sqrtf(fmaxf(fabsf(dot), 1e-6f)), dot);
    gate[s] = image ? 0.0f : 1.0f / (1.0f + expf(-z));
    st(gates + t * 4 + s, gate[s], Traffic::coefficient);
  }
  __syncthreads();
  for (int s = 0; s < 4; ++s) {
    for (int n = threadIdx.x * P::N; n < d; n += blockDim.x * P::N) {
      float out[P::N];
      P::load(h + (t * 4 + s) * d + n, out, Traffic::activation);
#pragma unroll
      for (int k = 0; k < P::N; ++k) out[k] += gate[s] * kv[4 * d + n + k];
      P::store(h_out + (t * 4 + s) * d + n, out, Traffic::activation);
    }
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
