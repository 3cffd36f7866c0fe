#pragma once
// Causal attention over a KV cache (optimized/attention.hpp): one block per (new token, head).
// Warps take the visible positions in turn, lanes span the head dimension (coalesced key loads),
// scores go to shared memory; a block max and one warp's fixed-order sum give the softmax; each
// thread then owns output elements and sums the values over positions in order (coalesced value
// loads). Every reduction has one order under any schedule.
#include "optimized/kernel.cuh"

// Inside the backend namespace: emu and cuda builds of the same source must not share symbols.
namespace tandem::TANDEM_BACKEND_NS {

// q: [T, d]; keys, values: [P + T, d]; o: [T, d]; grid (T, heads).
// Dynamic shared memory: (P + T) scores + hd staged query floats.
template <class Act>
__global__ void attention_causal(const Act* __restrict__ q, const Act* __restrict__ keys,
                                 const Act* __restrict__ values, int P, int d, int hd,
                                 Act* __restrict__ o) {
  static_assert(sizeof(Act) <= 4, "activations are float or bf16");
  TANDEM_DYNAMIC_SHARED(float, shared);
  __shared__ float scratch[kMaxWarps];
  const int t = blockIdx.x, h = blockIdx.y;
  const int n = P + t + 1;             // visible positions, this token's own included
  float* scores = shared;              // [n]
  float* qh = shared + P + gridDim.x;  // [hd]
  const size_t col = static_cast<size_t>(h) * hd;
  for (int i = threadIdx.x; i < hd; i += blockDim.x)
    qh[i] = to_float(ld(q + static_cast<size_t>(t) * d + col + i, Traffic::activation));
  __syncthreads();
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  // NOTE: a divide by the correctly rounded sqrt, not rsqrtf: with sharp softmaxes every score's
  // relative error becomes an absolute error in the exponent.
  const float norm = sqrtf(static_cast<float>(hd));
  for (int j = warp; j < n; j += blockDim.x / kWarpSize) {
    float s = 0.0f;
    for (int i = lane; i < hd; i += kWarpSize)
      s += qh[i] * to_float(ld(keys + static_cast<size_t>(j) * d + col + i, Traffic::activation));
    s = warp_sum(s);
    if (lane == 0) scores[j] = s / norm;
  }
  __syncthreads();
  float local = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) local = fmaxf(local, scores[j]);
  const float top = block_max(local, scratch);
  // Warp 0 exponentiates and sums (lane-strided, then a butterfly): one order for any block size.
  __shared__ float total;
  if (warp == 0) {
    float sum = 0.0f;
    for (int j = lane; j < n; j += kWarpSize) sum += (scores[j] = expf(scores[j] - top));
    sum = warp_sum(sum);
    if (lane == 0) total = sum;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < hd; i += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < n; ++j)
      acc += scores[j] *
             to_float(ld(values + static_cast<size_t>(j) * d + col + i, Traffic::activation));
    st(o + static_cast<size_t>(t) * d + col + i, from_float<Act>(acc / total), Traffic::activation);
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
