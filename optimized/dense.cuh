#pragma once
// dense_rows: y[t] = W x[t]. One block per token; x[t] is staged in dynamic shared memory
// ([n_in] floats, read once with 16-byte loads), then, by the shape (problem/dense.hpp
// dense_kmajor):
//   rows of >= 128 inputs: each warp takes output rows in turn and reads its weight row with
//     coalesced 16-byte loads (warp_row_dot: lanes strided, a shuffle sum); with G groups
//     (block-diagonal W) output row r of group g = r / (n_out / G) dots its group's slice of x;
//   shorter rows: each thread takes four output channels in turn over the k-major weights
//     (dot4_kmajor: one coalesced 16-byte load per input, summed in k order; a last partial group
//     with 4-byte loads), so no lane idles on a short row and no shuffle is needed.
#include "optimized/kernel.cuh"

namespace tandem::TANDEM_BACKEND_NS {

template <class Act, bool kBias, bool kGelu>
__device__ __forceinline__ void dense_store(float v, const float* __restrict__ bias, int r,
                                            Act* __restrict__ y_row) {
  if (kBias) v += ld(bias + r, Traffic::weight);
  if (kGelu) v = 0.5f * v * (1.0f + erff(v / sqrtf(2.0f)));  // exact GELU, as the reference
  st(y_row + r, from_float<Act>(v), Traffic::activation);
}

// x: [T, n_in]; w: [n_out, n_in / groups] (kKmajor: one group, k-major [n_in, n_out rounded up
// to 4], the launcher's k_major); bias: [n_out] (kBias); y: [T, n_out]. n_in / groups a multiple
// of Pack<Act>::N (16-byte activation loads, hence of 4: 16-byte weight loads).
template <class Act, bool kBias, bool kGelu, bool kKmajor>
__global__ void dense_rows(const Act* __restrict__ x, const float* __restrict__ w,
                           const float* __restrict__ bias, int n_in, int n_out, int groups,
                           Act* __restrict__ y) {
  using P = Pack<Act>;
  static_assert(P::N % 4 == 0, "a pack of activations covers whole 16-byte weight loads");
  TANDEM_DYNAMIC_SHARED(float, staged);  // [n_in]
  const size_t t = blockIdx.x;
  for (int i = threadIdx.x * P::N; i < n_in; i += blockDim.x * P::N) {
    float v[P::N];
    P::load(x + t * n_in + i, v, Traffic::activation);
#pragma unroll
    for (int e = 0; e < P::N; ++e) staged[i + e] = v[e];
  }
  __syncthreads();
  Act* y_row = y + t * n_out;
  if constexpr (kKmajor) {
    const int stride = (n_out + 3) / 4 * 4;
    for (int c4 = 4 * threadIdx.x; c4 < n_out; c4 += 4 * blockDim.x) {
      float v[4];
      if (c4 + 4 <= n_out)
        dot4_kmajor(w, staged, n_in, stride, c4, v);
      else
        dot_tail_kmajor(w, staged, n_in, stride, c4, n_out, v);
      for (int e = 0; e < 4 && c4 + e < n_out; ++e)
        dense_store<Act, kBias, kGelu>(v[e], bias, c4 + e, y_row);
    }
  } else {
    const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
    const int group_in = n_in / groups, group_out = n_out / groups;
    for (int r = warp; r < n_out; r += blockDim.x / kWarpSize) {
      const float v = warp_row_dot(w + static_cast<size_t>(r) * group_in,
                                   staged + (r / group_out) * group_in, group_in);
      if (lane == 0) dense_store<Act, kBias, kGelu>(v, bias, r, y_row);
    }
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
