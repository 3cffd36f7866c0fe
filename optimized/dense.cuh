#pragma once
// dense_rows: y[t] = W x[t]. One block per token; x[t] is staged in dynamic shared memory
// ([n_in] floats, read once with 16-byte loads), then each warp takes output rows in turn and
// reads its weight row with coalesced 16-byte loads (warp_row_dot: lanes strided, a shuffle sum).
#include "optimized/kernel.cuh"

namespace tandem::TANDEM_BACKEND_NS {

// x: [T, n_in]; w: [n_out, n_in]; bias: [n_out] (kBias); y: [T, n_out]. n_in a multiple of
// Pack<Act>::N (16-byte activation loads, hence of 4: 16-byte weight loads).
template <class Act, bool kBias, bool kGelu>
__global__ void dense_rows(const Act* __restrict__ x, const float* __restrict__ w,
                           const float* __restrict__ bias, int n_in, int n_out,
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
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int r = warp; r < n_out; r += blockDim.x / kWarpSize) {
    float v = warp_row_dot(w + static_cast<size_t>(r) * n_in, staged, n_in);
    if (lane != 0) continue;
    if (kBias) v += ld(bias + r, Traffic::weight);
    if (kGelu) v = 0.5f * v * (1.0f + erff(v / sqrtf(2.0f)));  // exact GELU, as the reference
    st(y + t * n_out + r, from_float<Act>(v), Traffic::activation);
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
