#pragma once
// The KV cache's write kernels (problem/kvcache.hpp, DESIGN 5.5):
//   kv_quantize          one warp per record: values -> record (the quantizers alone)
//   kv_window_store      one block per token: Wkv x (warps over rows) -> pipeline -> ring slot
//   kv_compress_project  one block per token: a = Wkv x, b = Wgate x + ape -> fp32 scratch
//   kv_compress_pool     one block per entry: softmax pooling over the slots -> pipeline -> slot
//                        j (one more block writes the decode state)
//   kv_compress_decode   one block: one token into the state; pools and stores when its group
//                        completes, then shifts the state (the same pooling and pipeline code
//                        as the prefill, so prefill == token-by-token decode bit for bit)
//   index_key_store      one block per entry: Wk latent -> pipeline -> index key
// The pipeline (bf16, RMSNorm, RoPE on adjacent pairs, Hadamard) runs in warp 0 with dims / 32
// contiguous values per lane; the record store is optimized/kv_record.cuh.
#include "optimized/kernel.cuh"
#include "optimized/kv_record.cuh"
#include "problem/kvcache.hpp"

namespace tandem::TANDEM_BACKEND_NS {

// Loads one row of bf16 values [n] (n a multiple of 8) into shared memory as floats.
__device__ __forceinline__ void stage_bf16_row(const bf16* __restrict__ row, float* staged, int n) {
  using P = Pack<bf16>;
  for (int i = threadIdx.x * P::N; i < n; i += blockDim.x * P::N) {
    float v[P::N];
    P::load(row + i, v, Traffic::activation);
#pragma unroll
    for (int e = 0; e < P::N; ++e) staged[i + e] = v[e];
  }
}

// z = W staged for W k-major [n, rows] (rows a multiple of 4): a thread per four channels.
__device__ __forceinline__ void block_matvec(const float* __restrict__ wt, const float* staged,
                                             int n, int rows, float* z) {
  for (int c4 = 4 * threadIdx.x; c4 < rows; c4 += 4 * blockDim.x) {
    float v[4];
    dot4_kmajor(wt, staged, n, rows, c4, v);
#pragma unroll
    for (int e = 0; e < 4; ++e) z[c4 + e] = v[e];
  }
}

// Where a record's pipeline writes beside the cache: its latent row and its stored row (bf16).
struct KvRecordTaps {
  bf16* latent;  // [dims] or nullptr
  bf16* stored;  // [dims]
};

// The record pipeline on z (shared memory, [dims]) with the record's RoPE row cs (cos [32], then
// sin [32]); leaves the stored values in z and stores
// the record. Called by every lane of warp 0.
template <KvFormat F, bool kRotate>
__device__ void finish_record_warp(float* z, const float* __restrict__ norm_w, float eps,
                                   const float* __restrict__ cs, KvRecordTaps taps,
                                   uint8_t* __restrict__ pool, int64_t slot, int64_t page_size,
                                   bool canonical_zero) {
  constexpr KvFormatInfo f = kv_format_info(F);
  constexpr int kDims = f.dims(), kE = kDims / kWarpSize;
  static_assert(!kRotate || kDims == 128, "the index keys' Hadamard is 128 wide (4 per lane)");
  const int lane = threadIdx.x % kWarpSize, first = lane * kE;
  float v[kE];
  float ss = 0.0f;
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    v[e] = round_bf16(z[first + e]);
    if (first + e < f.normed) ss += v[e] * v[e];
  }
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / float(f.normed) + eps);
#pragma unroll
  for (int e = 0; e < kE; ++e)
    if (first + e < f.normed)
      v[e] = round_bf16(v[e] * inv * ld(norm_w + first + e, Traffic::weight));
  if (taps.latent)
#pragma unroll
    for (int e = 0; e < kE; ++e) st(taps.latent + first + e, bf16(v[e]), Traffic::activation);
  rope_lane_pairs<kDims>(v, first, cs);
  if constexpr (kRotate) {  // fast Walsh-Hadamard: strides 1, 2 in the lane, 4..64 across lanes
#pragma unroll
    for (int h = 1; h < kE; h *= 2)
#pragma unroll
      for (int e = 0; e < kE; ++e)
        if (!(e & h)) {
          const float a = v[e], b = v[e + h];
          v[e] = a + b, v[e + h] = a - b;
        }
    for (int m = 1; m < kWarpSize; m *= 2)
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, v[e], m);
        v[e] = (lane & m) ? other - v[e] : v[e] + other;
      }
#pragma unroll
    for (int e = 0; e < kE; ++e) v[e] = round_bf16(v[e] * 0.08838834764831845f);  // 1/sqrt(128)
  }
#pragma unroll
  for (int e = 0; e < kE; ++e) {
    z[first + e] = v[e];
    st(taps.stored + first + e, bf16(v[e]), Traffic::activation);
  }
  __syncwarp();
  store_record_warp<F>(z, pool, slot, page_size, canonical_zero, Traffic::kv_cache);
}

// One record of a block: z = W row (row: [n] bf16, staged; W k-major [n, dims]), then the
// pipeline into `slot`. Dynamic shared memory: [n + dims] floats.
template <KvFormat F>
__device__ void store_projected_record(const bf16* __restrict__ row, int n,
                                       const float* __restrict__ wt,
                                       const float* __restrict__ norm_w, float eps,
                                       const float* __restrict__ cs, bf16* __restrict__ stored,
                                       uint8_t* pool, int64_t slot, int64_t page_size,
                                       bool canonical_zero) {
  constexpr int kDims = kv_format_info(F).dims();
  static_assert(kDims % 4 == 0, "four output channels per thread");
  TANDEM_DYNAMIC_SHARED(float, staged);  // [n] then z [dims]
  float* z = staged + n;
  stage_bf16_row(row, staged, n);
  __syncthreads();
  block_matvec(wt, staged, n, kDims, z);
  __syncthreads();
  if (threadIdx.x / kWarpSize == 0)
    finish_record_warp<F, false>(z, norm_w, eps, cs, {nullptr, stored}, pool, slot, page_size,
                                 canonical_zero);
}

// ---------------------------------------------------------------- the quantizers alone
// values: [N, dims] bf16; slots: [N]. One warp per row; its row staged in the warp's part of
// dynamic shared memory ([warps, dims] floats).
template <KvFormat F>
__global__ void kv_quantize(const bf16* __restrict__ values, const int32_t* __restrict__ slots,
                            int n, int64_t page_size, bool canonical_zero, Traffic traffic,
                            uint8_t* pool) {
  constexpr int kDims = kv_format_info(F).dims();
  static_assert(kDims % 8 == 0, "rows are whole 16-byte bf16 packs");
  TANDEM_DYNAMIC_SHARED(float, staged);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  float* mine = staged + warp * kDims;
  for (int r = blockIdx.x * warps + warp; r < n; r += gridDim.x * warps) {
    for (int i = lane * 8; i < kDims; i += kWarpSize * 8) {
      float v[8];
      Pack<bf16>::load(values + static_cast<size_t>(r) * kDims + i, v, Traffic::activation);
#pragma unroll
      for (int e = 0; e < 8; ++e) mine[i + e] = v[e];
    }
    __syncwarp();
    int32_t slot = lane == 0 ? ld(slots + r, Traffic::coefficient) : 0;  // one load, broadcast
    slot = __shfl_sync(0xffffffffu, slot, 0);
    store_record_warp<F>(mine, pool, slot, page_size, canonical_zero, traffic);
    __syncwarp();  // the row's values are read before the next row overwrites them
  }
}

// ---------------------------------------------------------------- the window
// x: [T, d] bf16; wkv: k-major [d, dims]; rope: [T, 64] (row t: position start + t); stored: [T,
// dims]. Dynamic shared memory: [d + dims] floats.
template <KvFormat F>
__global__ void kv_window_store(const bf16* __restrict__ x, const float* __restrict__ wkv,
                                const float* __restrict__ norm_w, const float* __restrict__ rope,
                                int d, int64_t start, int window, float eps, int64_t page_size,
                                bool canonical_zero, uint8_t* pool, bf16* __restrict__ stored) {
  constexpr int kDims = kv_format_info(F).dims();
  const int64_t t = blockIdx.x;
  store_projected_record<F>(x + t * d, d, wkv, norm_w, eps, rope + t * kKvRopeDims,
                            stored + t * kDims, pool, (start + t) % window, page_size,
                            canonical_zero);
}

// ---------------------------------------------------------------- the compressors
// One slot of an online softmax pool: the running max m, the sum of e^(b - m) and of
// e^(b - m) a. An empty slot (b = -inf: the previous group of entry 0) adds nothing.
struct OnlinePool {
  float m = -INFINITY, sum = 0.0f, acc = 0.0f;
  __device__ __forceinline__ void add(float a, float b) {
    if (b == -INFINITY) return;
    if (b > m) {
      const float rescale = expf(m - b);
      sum *= rescale, acc *= rescale, m = b;
    }
    const float e = expf(b - m);
    sum += e;
    acc += e * a;
  }
};

// Channel i of an entry from its slots (problem/kvcache.hpp), one pass over them: with overlap
// the previous group's r rows (first-half channels; prev_a == nullptr: entry 0, nothing read)
// before this group's r rows (second-half channels); rows `stride` floats apart. r = 1 (not
// gated): a.
template <bool kOverlap, bool kGated>
__device__ __forceinline__ float pool_channel(const float* prev_a, const float* prev_b,
                                              const float* cur_a, const float* cur_b, int ratio,
                                              int stride, int i, int D) {
  if constexpr (!kGated) return ld(cur_a + i, Traffic::kv_cache);
  OnlinePool p;
  for (int s = 0; kOverlap && prev_a && s < ratio; ++s)
    p.add(ld(prev_a + s * stride + i, Traffic::kv_cache),
          ld(prev_b + s * stride + i, Traffic::kv_cache));
  const int off = kOverlap ? D : 0;
  for (int s = 0; s < ratio; ++s)
    p.add(ld(cur_a + s * stride + off + i, Traffic::kv_cache),
          ld(cur_b + s * stride + off + i, Traffic::kv_cache));
  return p.acc / p.sum;
}

// The token's a and b (width W) into rows a_row / b_row, from x staged in shared memory; Wkv and
// Wgate k-major [d, W].
template <bool kGated, bool kApe>
__device__ __forceinline__ void project_token(const float* __restrict__ wkv,
                                              const float* __restrict__ wgate,
                                              const float* __restrict__ ape, const float* staged,
                                              int d, int W, int64_t pos, int ratio, float* a_row,
                                              float* b_row) {
  for (int c4 = 4 * threadIdx.x; c4 < W; c4 += 4 * blockDim.x) {
    float v[4];
    dot4_kmajor(wkv, staged, d, W, c4, v);
    Pack<float>::store(a_row + c4, v, Traffic::kv_cache);
    if constexpr (kGated) {
      dot4_kmajor(wgate, staged, d, W, c4, v);
      if constexpr (kApe) {
        float bias[4];
        load_floats<4>(ape + (pos % ratio) * W + c4, bias, Traffic::weight);
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] += bias[e];
      }
      Pack<float>::store(b_row + c4, v, Traffic::kv_cache);
    }
  }
}

// x: [T, d] bf16; Wkv, Wgate k-major [d, W], W a multiple of 4 -> a, b: [T, W] fp32 scratch.
// Dynamic shared memory: [d] floats.
template <bool kGated, bool kApe>
__global__ void kv_compress_project(const bf16* __restrict__ x, const float* __restrict__ wkv,
                                    const float* __restrict__ wgate, const float* __restrict__ ape,
                                    int d, int W, int ratio, float* a, float* b) {
  TANDEM_DYNAMIC_SHARED(float, staged);
  const int64_t t = blockIdx.x;
  stage_bf16_row(x + t * d, staged, d);
  __syncthreads();
  // NOTE: b is null without a gate: no offset may be applied to it (UBSan).
  project_token<kGated, kApe>(wkv, wgate, ape, staged, d, W, t, ratio, a + t * W,
                              kGated ? b + t * W : nullptr);
}

// Blocks 0..entries-1: entry j from the scratch rows of its slots into slot j; block `entries`:
// the decode state [c r, W] (the last complete group with overlap, the partial group's tokens,
// empty rows a = 0, b = -inf). Dynamic shared memory: [D] floats.
template <KvFormat F, bool kOverlap, bool kGated, bool kRotate>
__global__ void kv_compress_pool(const float* a, const float* b, const float* __restrict__ norm_w,
                                 const float* __restrict__ rope /* [entries, 64]: r j */, int T,
                                 int ratio, float eps, int64_t page_size, bool canonical_zero,
                                 uint8_t* pool, bf16* __restrict__ latent,
                                 bf16* __restrict__ stored, float* state_a, float* state_b) {
  constexpr int D = kv_format_info(F).dims(), W = (kOverlap ? 2 : 1) * D;
  TANDEM_DYNAMIC_SHARED(float, z);
  const int entries = T / ratio;
  const int j = blockIdx.x;
  if (j == entries) {  // the state
    const int rows = (kOverlap ? 2 : 1) * ratio, cur0 = kOverlap ? ratio : 0;
    for (int k = threadIdx.x; k < rows * W; k += blockDim.x) {
      const int row = k / W, ch = k % W;
      int t = -1;  // the token this row holds, if any
      if (kOverlap && row < ratio && entries > 0) t = (entries - 1) * ratio + row;
      if (row >= cur0 && entries * ratio + (row - cur0) < T) t = entries * ratio + (row - cur0);
      const bool held = t >= 0;
      st(state_a + k, held ? ld(a + static_cast<size_t>(t) * W + ch, Traffic::kv_cache) : 0.0f,
         Traffic::kv_cache);
      if (kGated)
        st(state_b + k,
           held ? ld(b + static_cast<size_t>(t) * W + ch, Traffic::kv_cache) : -INFINITY,
           Traffic::kv_cache);
    }
    return;
  }
  const size_t group = static_cast<size_t>(j) * ratio * W;
  const bool prev = kOverlap && j > 0;
  for (int i = threadIdx.x; i < D; i += blockDim.x)
    z[i] = pool_channel<kOverlap, kGated>(prev ? a + group - ratio * W : nullptr,
                                          prev && kGated ? b + group - ratio * W : nullptr,
                                          a + group, kGated ? b + group : nullptr, ratio, W, i, D);
  __syncthreads();
  if (threadIdx.x / kWarpSize == 0)
    finish_record_warp<F, kRotate>(z, norm_w, eps, rope + int64_t(j) * kKvRopeDims,
                                   {latent + int64_t(j) * D, stored + int64_t(j) * D}, pool, j,
                                   page_size, canonical_zero);
}

// One decode step at `pos`: the token's a, b into its state row; when (pos + 1) % r == 0 the
// entry pos / r from the state rows (into slot 0 of the step's outputs), then the group's rows
// move to the previous group's (overlap) and are emptied. Dynamic shared memory: [d + D] floats.
template <KvFormat F, bool kOverlap, bool kGated, bool kApe, bool kRotate>
__global__ void kv_compress_decode(const bf16* __restrict__ x, const float* __restrict__ wkv,
                                   const float* __restrict__ wgate, const float* __restrict__ ape,
                                   const float* __restrict__ norm_w,
                                   const float* __restrict__ rope /* [64]: the entry's r j */,
                                   int d, int64_t pos, int ratio, float eps, int64_t page_size,
                                   bool canonical_zero, uint8_t* pool, bf16* __restrict__ latent,
                                   bf16* __restrict__ stored, float* state_a, float* state_b) {
  constexpr int D = kv_format_info(F).dims(), W = (kOverlap ? 2 : 1) * D;
  TANDEM_DYNAMIC_SHARED(float, staged);  // [d] then z [D]
  float* z = staged + d;
  const int cur0 = kOverlap ? ratio : 0, row = cur0 + int(pos % ratio);
  stage_bf16_row(x, staged, d);
  __syncthreads();
  project_token<kGated, kApe>(wkv, wgate, ape, staged, d, W, pos, ratio, state_a + row * W,
                              kGated ? state_b + row * W : nullptr);
  __syncthreads();
  if ((pos + 1) % ratio != 0) return;
  for (int i = threadIdx.x; i < D; i += blockDim.x)
    z[i] = pool_channel<kOverlap, kGated>(state_a, state_b, state_a + cur0 * W,
                                          kGated ? state_b + cur0 * W : nullptr, ratio, W, i, D);
  __syncthreads();
  if (threadIdx.x / kWarpSize == 0)
    finish_record_warp<F, kRotate>(z, norm_w, eps, rope, {latent, stored}, pool, pos / ratio,
                                   page_size, canonical_zero);
  for (int k = threadIdx.x; k < ratio * W; k += blockDim.x) {
    const int cur = cur0 * W + k;
    if (kOverlap) {
      st(state_a + k, ld(state_a + cur, Traffic::kv_cache), Traffic::kv_cache);
      st(state_b + k, ld(state_b + cur, Traffic::kv_cache), Traffic::kv_cache);
    }
    st(state_a + cur, 0.0f, Traffic::kv_cache);
    if (kGated) st(state_b + cur, -INFINITY, Traffic::kv_cache);
  }
}

// ---------------------------------------------------------------- V4.1's index keys
// latent: [N, 512] bf16 of entries first..; wk: k-major [512, 128]; rope: [N, 64] (row j:
// r (first + j)). Entry first + j into its slot. Dynamic shared memory: [512 + 128] floats.
template <KvFormat F>
__global__ void index_key_store(const bf16* __restrict__ latent, const float* __restrict__ wk,
                                const float* __restrict__ norm_w, const float* __restrict__ rope,
                                int64_t first, float eps, int64_t page_size, bool canonical_zero,
                                uint8_t* pool, bf16* __restrict__ stored) {
  static_assert(kv_format_info(F).dims() == kIndexKeyDims, "index keys are 128 wide");
  const int64_t j = blockIdx.x;
  store_projected_record<F>(latent + j * kKvMainDims, kKvMainDims, wk, norm_w, eps,
                            rope + j * kKvRopeDims, stored + j * kIndexKeyDims, pool, first + j,
                            page_size, canonical_zero);
}

}  // namespace tandem::TANDEM_BACKEND_NS
