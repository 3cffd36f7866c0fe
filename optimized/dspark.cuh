#pragma once
// DSpark batched verification (DESIGN 5.4): one warp per request, drafted positions in order.
// Accept x_k when u * max(p_d(x_k), 1e-8) < p_t(x_k) (probability min(1, p_t/max(p_d, 1e-8)));
// at the first rejection draw from max(0, p_t - p_d) (from p_t if its mass is <= 1e-8) and stop; if
// all K pass, draw the bonus from the last p_t. Greedy: accept while x_k is the argmax of p_t
// (ties: lower index), then emit that argmax. Draws: Philox keyed by (seed, request, position),
// stream 0 to accept, 1 to sample. Inverse-CDF sums: lane l owns the l-th of 32 contiguous blocks;
// blocks combine in order (reference/dspark).
#include "core/dspark_config.hpp"
#include "core/philox.hpp"
#include "optimized/kernel.cuh"

// Inside the backend namespace: emu and cuda builds of the same source must not share symbols.
namespace tandem::TANDEM_BACKEND_NS {

inline constexpr int kVerifyWarpsPerBlock = 4;

// Weight of token v: the residual max(0, p_t - p_d) (with p_d) or p_t itself (p_d == nullptr).
__device__ __forceinline__ float draw_weight(const float* p_t, const float* p_d, int64_t v) {
  const float t = ld(p_t + v, Traffic::activation);
  return p_d ? fmaxf(0.0f, t - ld(p_d + v, Traffic::activation)) : t;
}

// This lane's block sum of the weights (`mine`) and the warp's total, blocks added in order.
struct WarpBlockSums {
  float mine, total;
};
__device__ __forceinline__ WarpBlockSums warp_block_sums(const float* p_t, const float* p_d,
                                                         int64_t begin, int64_t end) {
  WarpBlockSums s{0.0f, 0.0f};
  for (int64_t v = begin; v < end; ++v) s.mine += draw_weight(p_t, p_d, v);
  for (int b = 0; b < kWarpSize; ++b) s.total += __shfl_sync(0xffffffffu, s.mine, b);
  return s;
}

// Warp-wide inverse CDF over V weights with uniform u; every lane returns the index. A residual
// (p_d given) of total mass <= kResidualMassFloor is replaced by p_t (DESIGN 5.4's guard).
__device__ __forceinline__ int32_t warp_inverse_cdf(const float* p_t, const float* p_d, int64_t V,
                                                    float u) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t block = (V + kWarpSize - 1) / kWarpSize;
  const int64_t begin = lane * block, end = begin + block < V ? begin + block : V;
  WarpBlockSums sums = warp_block_sums(p_t, p_d, begin, end);
  if (p_d && sums.total <= kResidualMassFloor) {
    p_d = nullptr;
    sums = warp_block_sums(p_t, nullptr, begin, end);
  }
  const float mine = sums.mine, total = sums.total;
  const float target = u * total;
  float before = 0.0f;
  int chosen = -1;
  float chosen_before = 0.0f;
  for (int b = 0; b < kWarpSize; ++b) {
    const float s = __shfl_sync(0xffffffffu, mine, b);
    if (chosen < 0 && before + s > target) chosen = b, chosen_before = before;
    before += s;
  }
  int32_t found = -1;
  if (lane == chosen) {
    float cum = chosen_before;
    for (int64_t v = begin; v < end && found < 0; ++v)
      if ((cum += draw_weight(p_t, p_d, v)) > target) found = static_cast<int32_t>(v);
  }
  if (chosen >= 0) found = __shfl_sync(0xffffffffu, found, chosen);
  if (chosen < 0 || found < 0) {  // rounding left the target at the end: the last non-zero
    int32_t last = -1;
    for (int64_t v = begin; v < end; ++v)
      if (draw_weight(p_t, p_d, v) > 0.0f) last = static_cast<int32_t>(v);
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const int32_t other = __shfl_xor_sync(0xffffffffu, last, offset);
      last = other > last ? other : last;
    }
    found = last < 0 ? 0 : last;
  }
  return found;
}

// Warp-wide argmax of p[0..V) (lowest index of the largest); every lane returns it.
__device__ __forceinline__ int32_t warp_argmax(const float* p, int64_t V) {
  float best = -INFINITY;
  int32_t best_v = INT32_MAX;
  for (int64_t v = threadIdx.x % kWarpSize; v < V; v += kWarpSize) {
    const float x = ld(p + v, Traffic::activation);
    if (x > best) best = x, best_v = static_cast<int32_t>(v);
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float x = __shfl_xor_sync(0xffffffffu, best, offset);
    const int32_t i = __shfl_xor_sync(0xffffffffu, best_v, offset);
    if (x > best || (x == best && i < best_v)) best = x, best_v = i;
  }
  return best_v;
}

// Lane 0 reads one per-request word and the warp shares it; `fallback` when the array is absent.
template <class T>
__device__ __forceinline__ T warp_request_word(const T* words, int r, T fallback) {
  T w = fallback;
  if (words && threadIdx.x % kWarpSize == 0) w = ld(words + r, Traffic::coefficient);
  return __shfl_sync(0xffffffffu, w, 0);
}

// draft: [R, K]; p_draft: [R, K, V]; p_target: [R, K + 1, V]; position: [R]; drafted: [R] or
// null (k_r = K); request: [R] or null (id r); accepted: [R]; emitted: [R, K + 1] (-1 after the
// extra token).
__global__ void dspark_verify(const int32_t* __restrict__ draft, const float* __restrict__ p_draft,
                              const float* __restrict__ p_target,
                              const uint32_t* __restrict__ position,
                              const int32_t* __restrict__ drafted,
                              const uint32_t* __restrict__ request, int R, int K, int64_t V,
                              uint64_t seed, bool greedy, int32_t* __restrict__ accepted,
                              int32_t* __restrict__ emitted) {
  const int r = blockIdx.x * kVerifyWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (r >= R) return;  // whole warps: one request per warp
  const uint32_t pos0 = warp_request_word(position, r, 0u);
  const int k_r = warp_request_word(drafted, r, K);  // this request's drafts; rows after: padding
  const uint32_t id = warp_request_word(request, r, static_cast<uint32_t>(r));
  int k = 0;
  int32_t extra = -1;
  for (; k < k_r; ++k) {
    const float* pt = p_target + (static_cast<size_t>(r) * (K + 1) + k) * V;
    const float* pd = p_draft + (static_cast<size_t>(r) * K + k) * V;
    int32_t x = 0;
    if (lane == 0) x = ld(draft + static_cast<size_t>(r) * K + k, Traffic::coefficient);
    x = __shfl_sync(0xffffffffu, x, 0);
    if (greedy) {
      const int32_t best = warp_argmax(pt, V);
      if (x == best) continue;
      extra = best;
      break;
    }
    const Philox4 draw = philox_draw(seed, id, pos0 + k, 0);
    int accept = 0;
    if (lane == 0)
      accept = philox_uniform(draw.v[0]) *
                   fmaxf(ld(pd + x, Traffic::activation), kDraftProbabilityFloor) <
               ld(pt + x, Traffic::activation);
    if (__shfl_sync(0xffffffffu, accept, 0)) continue;
    const Philox4 sample = philox_draw(seed, id, pos0 + k, 1);
    extra = warp_inverse_cdf(pt, pd, V, philox_uniform(sample.v[0]));
    break;
  }
  if (k == k_r) {  // all accepted: the bonus from row k_r
    const float* pt = p_target + (static_cast<size_t>(r) * (K + 1) + k_r) * V;
    extra = greedy ? warp_argmax(pt, V)
                   : warp_inverse_cdf(pt, nullptr, V,
                                      philox_uniform(philox_draw(seed, id, pos0 + k_r, 1).v[0]));
  }
  if (lane == 0) st(accepted + r, static_cast<int32_t>(k), Traffic::activation);
  for (int j = lane; j <= K; j += kWarpSize) {
    int32_t token = -1;
    if (j < k) token = ld(draft + static_cast<size_t>(r) * K + j, Traffic::coefficient);
    if (j == k) token = extra;
    st(emitted + static_cast<size_t>(r) * (K + 1) + j, token, Traffic::activation);
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
