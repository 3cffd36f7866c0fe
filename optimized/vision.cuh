#pragma once
// Vision kernels (DESIGN 5.3).
// vision_unshuffle: one block per output token; threads walk its 9C outputs in order (coalesced
// stores), each reading its source patch value or writing 0 for the right/bottom padding.
// vision_unshuffle_inverse: one block per patch; threads walk its C channels.
// vision_rope_2d: one block per token; a thread rotates one (x1[i], x2[i]) pair of one head.
// moe_gate_biased_topk: one warp per token; each lane owns experts lane, lane + 32, ...; k rounds
// of a warp argmax (ties: lower index) over s + bias; weights from the unbiased s. Where the gate
// hashes, a text token's warp instead reads its id's tid2eid row (lane j its expert j) and only
// those k logits.
#include <climits>
#include <cmath>

#include "optimized/kernel.cuh"
#include "problem/vision.hpp"

// Inside the backend namespace: emu and cuda builds of the same source must not share symbols.
namespace tandem::TANDEM_BACKEND_NS {

inline constexpr int kMoeExpertsPerLane = kMoeMaxExperts / kWarpSize;
inline constexpr int kMoeWarpsPerBlock = 4;
static_assert(kMoeMaxExperts % kWarpSize == 0, "experts are spread evenly over the lanes");

// grid: [h, w, C]; tokens: [ceil(h/3) * ceil(w/3), 9C], channel-major (c * 9 + ki * 3 + kj).
template <class Act>
__global__ void vision_unshuffle(const Act* __restrict__ grid, int h, int w, int C,
                                 Act* __restrict__ tokens) {
  const int tw = (w + 2) / 3;
  const int ti = blockIdx.x / tw, tj = blockIdx.x % tw;
  for (int o = threadIdx.x; o < 9 * C; o += blockDim.x) {
    const int c = o / 9, ki = o % 9 / 3, kj = o % 3;
    const int y = 3 * ti + ki, x = 3 * tj + kj;
    Act v = from_float<Act>(0.0f);
    if (y < h && x < w)
      v = ld(grid + (static_cast<size_t>(y) * w + x) * C + c, Traffic::activation);
    st(tokens + static_cast<size_t>(blockIdx.x) * 9 * C + o, v, Traffic::activation);
  }
}

template <class Act>
// One block per patch of the [h, w] grid (h = gridDim.x / w).
__global__ void vision_unshuffle_inverse(const Act* __restrict__ tokens, int w, int C,
                                         Act* __restrict__ grid) {
  const int y = blockIdx.x / w, x = blockIdx.x % w, tw = (w + 2) / 3;
  const size_t token = static_cast<size_t>(y / 3) * tw + x / 3;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    st(grid + static_cast<size_t>(blockIdx.x) * C + c,
       ld(tokens + token * 9 * C + c * 9 + (y % 3) * 3 + x % 3, Traffic::activation),
       Traffic::activation);
}

// x, out: [N, heads, hd]; row, col: [N]; rotation: [positions, hd / 4] (cos, sin) pairs of
// pos * theta^(-2j / rope), rope = hd / 2, precomputed on the host (as freqs_cis in the model):
// the kernel then needs no range reduction.
template <class Act>
__global__ void vision_rope_2d(const Act* __restrict__ x, const int32_t* __restrict__ row,
                               const int32_t* __restrict__ col, const float2* __restrict__ rotation,
                               int heads, int hd, Act* __restrict__ out) {
  __shared__ int32_t pos[2];
  const size_t n = blockIdx.x;
  if (threadIdx.x == 0) {
    pos[0] = ld(row + n, Traffic::coefficient);
    pos[1] = ld(col + n, Traffic::coefficient);
  }
  __syncthreads();
  const int rope = hd / 2, half = rope / 2;
  for (int p = threadIdx.x; p < heads * rope; p += blockDim.x) {
    const int head = p / rope, i = p % rope;
    const size_t base = (n * heads + head) * hd;
    const float2 cs = ld(rotation + static_cast<size_t>(pos[i < half ? 0 : 1]) * half + i % half,
                         Traffic::weight);
    const float x1 = to_float(ld(x + base + i, Traffic::activation));
    const float x2 = to_float(ld(x + base + rope + i, Traffic::activation));
    st(out + base + i, from_float<Act>(x1 * cs.x - x2 * cs.y), Traffic::activation);
    st(out + base + rope + i, from_float<Act>(x2 * cs.x + x1 * cs.y), Traffic::activation);
  }
}

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// (value, index) order of the top-k: larger value first, ties to the lower index.
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

// The k experts of one ranked token (top-k of s + bias over every expert, ties to the lower
// index) into chosen / chosen_s, written by lane 0. logits, bias: [E].
__device__ void moe_rank_experts(const float* __restrict__ logits, const float* __restrict__ bias,
                                 int E, int k, int lane, int32_t* chosen, float* chosen_s) {
  float s[kMoeExpertsPerLane], biased[kMoeExpertsPerLane];
#pragma unroll
  for (int m = 0; m < kMoeExpertsPerLane; ++m) {
    const int e = lane + m * kWarpSize;
    s[m] = e < E ? sqrtf(softplus(ld(logits + e, Traffic::activation))) : 0.0f;
    biased[m] = e < E ? s[m] + ld(bias + e, Traffic::weight) : -INFINITY;
  }
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY, best_s = 0.0f;
    int best_e = INT32_MAX;
#pragma unroll
    for (int m = 0; m < kMoeExpertsPerLane; ++m)
      if (ranks_before(biased[m], lane + m * kWarpSize, best, best_e))
        best = biased[m], best_s = s[m], best_e = lane + m * kWarpSize;
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const float v = __shfl_xor_sync(0xffffffffu, best, offset);
      const float vs = __shfl_xor_sync(0xffffffffu, best_s, offset);
      const int ve = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (ranks_before(v, ve, best, best_e)) best = v, best_s = vs, best_e = ve;
    }
#pragma unroll
    for (int m = 0; m < kMoeExpertsPerLane; ++m)
      if (lane + m * kWarpSize == best_e) biased[m] = -INFINITY;  // taken
    if (lane == 0) chosen[j] = best_e, chosen_s[j] = best_s;
  }
}

static_assert(kMoeMaxTopK <= kWarpSize, "a hashed token's experts are read one a lane");

// logits: [T, E]; is_image: [T]; bias_text, bias_vl: [E]; experts, weights: [T, k]. Hashing:
// token_ids [T] and tid2eid [V, k]; both null where every token ranks.
__global__ void moe_gate_biased_topk(
    const float* __restrict__ logits, const uint8_t* __restrict__ is_image,
    const float* __restrict__ bias_text, const float* __restrict__ bias_vl,
    const int32_t* __restrict__ token_ids, const int32_t* __restrict__ tid2eid, int T, int E, int k,
    float route_scale, int32_t* __restrict__ experts, float* __restrict__ weights) {
  __shared__ int32_t chosen[kMoeWarpsPerBlock][kMoeMaxTopK];
  __shared__ float chosen_s[kMoeWarpsPerBlock][kMoeMaxTopK];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int t = blockIdx.x * kMoeWarpsPerBlock + warp;
  if (t >= T) return;  // whole warps only: T is per warp
  const float* row = logits + static_cast<size_t>(t) * E;
  const bool image = ld(is_image + t, Traffic::activation);
  if (tid2eid != nullptr && !image) {  // warp-uniform: the token id's row, lane j its expert j
    const size_t id = static_cast<size_t>(ld(token_ids + t, Traffic::activation));
    if (lane < k) {
      const int32_t e = ld(tid2eid + id * k + lane, Traffic::weight);
      chosen[warp][lane] = e;
      chosen_s[warp][lane] = sqrtf(softplus(ld(row + e, Traffic::activation)));
    }
  } else {
    moe_rank_experts(row, image ? bias_vl : bias_text, E, k, lane, chosen[warp], chosen_s[warp]);
  }
  __syncwarp();
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += chosen_s[warp][j];
  if (lane < k) {
    st(experts + static_cast<size_t>(t) * k + lane, chosen[warp][lane], Traffic::activation);
    st(weights + static_cast<size_t>(t) * k + lane,
       chosen_s[warp][lane] / (sum + 1e-20f) * route_scale, Traffic::activation);
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
