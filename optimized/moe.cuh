#pragma once
// MoE expert FFN (optimized/moe.hpp): one block per token. y is staged in shared memory; for each
// selected expert (selection order) warps compute the hidden units swiglu(gate row . y, up row .
// y) (the release's clamped SwiGLU) into shared memory, then the output rows W_out[e] h, each
// output row owned by one warp and accumulated in shared memory with its gate weight, so every
// sum has one fixed order under any schedule.
#include "optimized/kernel.cuh"
#include "problem/moe.hpp"  // kSwigluLimit

// Inside the backend namespace: emu and cuda builds of the same source must not share symbols.
namespace tandem::TANDEM_BACKEND_NS {

// silu(min(gate, limit)) * clamp(up, -limit, limit), problem/moe.hpp kSwigluLimit.
__device__ __forceinline__ float swiglu(float gate, float up) {
  const float g = fminf(gate, kSwigluLimit);
  return g / (1.0f + expf(-g)) * fminf(fmaxf(up, -kSwigluLimit), kSwigluLimit);
}

// y: [T, d]; experts, weights: [T, k]; w_in: [E, 2H, d] (gate rows, then up rows); w_out:
// [E, d, H]; f: [T, d].
// Dynamic shared memory: (2d + H) floats. d a multiple of 8 (packed loads), H of 4 (row dots).
template <class Act>
__global__ void moe_experts_weighted(const Act* __restrict__ y, const int32_t* __restrict__ experts,
                                     const float* __restrict__ weights,
                                     const float* __restrict__ w_in,
                                     const float* __restrict__ w_out, int d, int H, int k,
                                     Act* __restrict__ f) {
  using P = Pack<Act>;
  static_assert(P::N <= 8, "d must be a multiple of the pack width (validated as 8)");
  TANDEM_DYNAMIC_SHARED(float, shared);
  float* staged = shared;          // [d]
  float* acc = shared + d;         // [d]
  float* hidden = shared + 2 * d;  // [H]
  __shared__ int32_t expert;
  __shared__ float weight;
  const size_t t = blockIdx.x;
  for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
    float v[P::N];
    P::load(y + t * d + i, v, Traffic::activation);
#pragma unroll
    for (int e = 0; e < P::N; ++e) staged[i + e] = v[e], acc[i + e] = 0.0f;
  }
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  for (int j = 0; j < k; ++j) {
    if (threadIdx.x == 0) {
      expert = ld(experts + t * k + j, Traffic::coefficient);
      weight = ld(weights + t * k + j, Traffic::coefficient);
    }
    __syncthreads();  // staged / acc ready, this expert known
    const float* in_rows = w_in + static_cast<size_t>(expert) * 2 * H * d;
    for (int r = warp; r < H; r += warps) {
      const float gate = warp_row_dot(in_rows + static_cast<size_t>(r) * d, staged, d);
      const float up = warp_row_dot(in_rows + static_cast<size_t>(H + r) * d, staged, d);
      if (lane == 0) hidden[r] = swiglu(gate, up);
    }
    __syncthreads();
    const float* out_rows = w_out + static_cast<size_t>(expert) * d * H;
    for (int r = warp; r < d; r += warps) {
      const float s = warp_row_dot(out_rows + static_cast<size_t>(r) * H, hidden, H);
      if (lane == 0) acc[r] += weight * s;
    }
    __syncthreads();  // before the next expert overwrites `hidden`, `expert` and `weight`
  }
  for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
    float v[P::N];
#pragma unroll
    for (int e = 0; e < P::N; ++e) v[e] = acc[i + e];
    P::store(f + t * d + i, v, Traffic::activation);
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
