#pragma once
// dense_rows: y[t] = W x[t]. One block per token; x[t] is staged in dynamic shared memory
// ([n_in] floats, read once with 16-byte loads), then each thread takes four output channels in
// turn over the k-major weights (dot4_kmajor: one coalesced 16-byte load per input, summed in k
// order; a last partial group with 4-byte loads): no shuffles, every lane busy whatever n_in.
#include "optimized/kernel.cuh"

namespace tandem::TANDEM_BACKEND_NS {

// x: [T, n_in]; wt: k-major [n_in, stride] (stride: n_out rounded up to 4); bias: [n_out]
// (kBias); y: [T, n_out]. n_in a multiple of Pack<Act>::N (16-byte activation loads).
template <class Act, bool kBias, bool kGelu>
__global__ void dense_rows(const Act* __restrict__ x, const float* __restrict__ wt,
                           const float* __restrict__ bias, int n_in, int n_out,
                           Act* __restrict__ y) {
  using P = Pack<Act>;
  TANDEM_DYNAMIC_SHARED(float, staged);  // [n_in]
  const size_t t = blockIdx.x;
  for (int i = threadIdx.x * P::N; i < n_in; i += blockDim.x * P::N) {
    float v[P::N];
    P::load(x + t * n_in + i, v, Traffic::activation);
#pragma unroll
    for (int e = 0; e < P::N; ++e) staged[i + e] = v[e];
  }
  __syncthreads();
  const int stride = (n_out + 3) / 4 * 4;
  for (int c4 = 4 * threadIdx.x; c4 < n_out; c4 += 4 * blockDim.x) {
    float v[4];
    if (c4 + 4 <= n_out)
      dot4_kmajor(wt, staged, n_in, stride, c4, v);
    else
      dot_tail_kmajor(wt, staged, n_in, stride, c4, n_out, v);
    for (int e = 0; e < 4 && c4 + e < n_out; ++e) {
      float out = v[e];
      if (kBias) out += ld(bias + c4 + e, Traffic::weight);
      if (kGelu) out = 0.5f * out * (1.0f + erff(out / sqrtf(2.0f)));  // exact, as the reference
      st(y + t * n_out + c4 + e, from_float<Act>(out), Traffic::activation);
    }
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
