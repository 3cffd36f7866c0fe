#pragma once
// mHC residual kernels (DESIGN section 5.1). One block per token; threads stride over the
// hidden dimension in 16-byte packs. Coefficients per token are 24 floats:
// pre[0:4], post[4:8], comb[8:24] with comb[j][k] at 8 + 4j + k (input stream j -> output k).
//
// V4 unfused (four passes per site, 20d elements per token):
//   residual_mixes (4d) -> residual_collapse (5d) -> residual_rmsnorm (2d) -> F -> residual_post
//   (9d)
// V4.1 single pass (10d): residual_single_pass reads X_l and f_l once, writes X_{l+1} and the
// normalised collapse with the already-known pre, and forms X_{l+1}'s mixes on the fly.
#include "optimized/kernel.cuh"

// Inside the backend namespace: emu and cuda builds of the same source must not share symbols.
namespace tandem::TANDEM_BACKEND_NS {

inline constexpr int kHc = 4;  // streams (hc_mult); the kernels are written for 4
// Blocks of at most 256 threads: the single-pass kernel needs ~200 registers per thread (24 mix
// accumulators + 4 streams of packs), 256 x 204 fits the 64K register file. NOTE: no
// __launch_bounds__: with it ptxas trades registers for spills (see ci/ptxas-report).
inline constexpr int kResidualMaxThreads = 256;
inline constexpr int kMixes = 24;  // (2 + kHc) * kHc
inline constexpr int kPreAt = 0, kPostAt = 4, kCombAt = 8;
static_assert(kMixes == (2 + kHc) * kHc, "mix layout is pre, post, comb");
static_assert(kResidualMaxThreads <= kMaxWarps * kWarpSize, "block_sum scratch holds kMaxWarps");

struct SinkhornParams {
  int iters;       // sinkhorn_iters
  float hc_eps;    // added to pre and to every Sinkhorn normaliser
  float norm_eps;  // inside rsqrt(mean(x^2) + norm_eps)
};

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Divides every row (kColumns = false) or every column of c by its sum + eps.
template <bool kColumns>
__device__ __forceinline__ void normalise(float (&c)[kHc][kHc], float eps) {
#pragma unroll
  for (int a = 0; a < kHc; ++a) {
    float s = 0.0f;
#pragma unroll
    for (int b = 0; b < kHc; ++b) s += kColumns ? c[b][a] : c[a][b];
#pragma unroll
    for (int b = 0; b < kHc; ++b) (kColumns ? c[b][a] : c[a][b]) /= s + eps;
  }
}

// Row softmax + eps, a column pass, then (iters - 1) row/column passes; ends on columns.
__device__ __forceinline__ void sinkhorn4(float (&c)[kHc][kHc], const SinkhornParams& p) {
#pragma unroll
  for (int j = 0; j < kHc; ++j) {
    float mx = c[j][0];
#pragma unroll
    for (int k = 1; k < kHc; ++k) mx = fmaxf(mx, c[j][k]);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kHc; ++k) sum += (c[j][k] = expf(c[j][k] - mx));
#pragma unroll
    for (int k = 0; k < kHc; ++k) c[j][k] = c[j][k] / sum + p.hc_eps;
  }
  normalise<true>(c, p.hc_eps);
  for (int it = 1; it < p.iters; ++it) {
    normalise<false>(c, p.hc_eps);
    normalise<true>(c, p.hc_eps);
  }
}

// Turns the raw dot products m = fn @ x and sum(x^2) into the 24 coefficients and stores them.
// Run by one thread.
__device__ __forceinline__ void store_coefficients(const float* dots /* [24] */, float sum_sq,
                                                   int flat_dim, const float* __restrict__ base,
                                                   const float* __restrict__ scale,
                                                   const SinkhornParams& p,
                                                   float* __restrict__ coef_out /* [24] */) {
  const float rs = rsqrtf(sum_sq / flat_dim + p.norm_eps);
  float b[kMixes], s[3];
#pragma unroll
  for (int m = 0; m < kMixes; ++m) b[m] = ld(base + m, Traffic::weight);
#pragma unroll
  for (int i = 0; i < 3; ++i) s[i] = ld(scale + i, Traffic::weight);
  float out[kMixes];
#pragma unroll
  for (int i = 0; i < kHc; ++i) {
    out[kPreAt + i] = sigmoid(dots[kPreAt + i] * rs * s[0] + b[kPreAt + i]) + p.hc_eps;
    out[kPostAt + i] = 2.0f * sigmoid(dots[kPostAt + i] * rs * s[1] + b[kPostAt + i]);
  }
  float comb[kHc][kHc];
#pragma unroll
  for (int j = 0; j < kHc; ++j)
#pragma unroll
    for (int k = 0; k < kHc; ++k)
      comb[j][k] = dots[kCombAt + 4 * j + k] * rs * s[2] + b[kCombAt + 4 * j + k];
  sinkhorn4(comb, p);
#pragma unroll
  for (int j = 0; j < kHc; ++j)
#pragma unroll
    for (int k = 0; k < kHc; ++k) out[kCombAt + 4 * j + k] = comb[j][k];
#pragma unroll
  for (int m = 0; m < kMixes; m += 4) {
    float v[4] = {out[m], out[m + 1], out[m + 2], out[m + 3]};
    Pack<float>::store(coef_out + m, v, Traffic::coefficient);
  }
}

// Loads a token's 24 coefficients into shared memory (one 16-byte load per thread < 6).
__device__ __forceinline__ void load_coefficients(const float* __restrict__ coef, float* smem) {
  if (threadIdx.x < kMixes / 4) {
    float v[4];
    Pack<float>::load(coef + 4 * threadIdx.x, v, Traffic::coefficient);
#pragma unroll
    for (int i = 0; i < 4; ++i) smem[4 * threadIdx.x + i] = v[i];
  }
  __syncthreads();
}

// Accumulates fn @ x for one pack of stream k at hidden offset i (flat index k*d + i).
template <int N>
__device__ __forceinline__ void accumulate_mixes(float* acc /* [24] */, const float (&x)[N],
                                                 const float* __restrict__ fn, int flat_dim,
                                                 int flat_index) {
#pragma unroll
  for (int m = 0; m < kMixes; ++m) {
    float w[N];
    load_floats<N>(fn + static_cast<size_t>(m) * flat_dim + flat_index, w, Traffic::weight);
#pragma unroll
    for (int e = 0; e < N; ++e) acc[m] += w[e] * x[e];
  }
}

// ---------------------------------------------------------------- V4 unfused passes
// mixes: coef[t] from X[t]. X: [T, 4, d]; fn: [24, 4d]; base: [24]; scale: [3]; coef: [T, 24].
template <class Act>
__global__ void residual_mixes(const Act* __restrict__ x, const float* __restrict__ fn,
                               const float* __restrict__ base, const float* __restrict__ scale,
                               SinkhornParams p, int d, float* __restrict__ coef) {
  using P = Pack<Act>;
  __shared__ float scratch[kMaxWarps * (kMixes + 1)];
  const size_t t = blockIdx.x;
  float acc[kMixes + 1] = {};  // 24 dots, then sum of squares
#pragma unroll
  for (int k = 0; k < kHc; ++k) {
    for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
      float xv[P::N];
      P::load(x + (t * kHc + k) * d + i, xv, Traffic::activation);
#pragma unroll
      for (int e = 0; e < P::N; ++e) acc[kMixes] += xv[e] * xv[e];
      accumulate_mixes<P::N>(acc, xv, fn, kHc * d, k * d + i);
    }
  }
  block_sum(acc, scratch);
  if (threadIdx.x == 0)
    store_coefficients(acc, acc[kMixes], kHc * d, base, scale, p, coef + t * kMixes);
}

// collapse: u[t] = sum_j pre_j X[t, j]. u: [T, d].
template <class Act>
__global__ void residual_collapse(const Act* __restrict__ x, const float* __restrict__ coef, int d,
                                  Act* __restrict__ u) {
  using P = Pack<Act>;
  __shared__ float c[kMixes];
  const size_t t = blockIdx.x;
  load_coefficients(coef + t * kMixes, c);
  for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
    float out[P::N] = {};
#pragma unroll
    for (int j = 0; j < kHc; ++j) {
      float xv[P::N];
      P::load(x + (t * kHc + j) * d + i, xv, Traffic::activation);
#pragma unroll
      for (int e = 0; e < P::N; ++e) out[e] += c[kPreAt + j] * xv[e];
    }
    P::store(u + t * d + i, out, Traffic::activation);
  }
}

// RMSNorm in one pass over global memory: u is staged in dynamic shared memory ([d] floats).
// y[t] = u[t] * rsqrt(mean(u[t]^2) + eps) * w; w: [d], read when kGain (without: the release's
// per-head query norm, which has no weight).
template <class Act, bool kGain>
__global__ void residual_rmsnorm(const Act* __restrict__ u, const float* __restrict__ w, float eps,
                                 int d, Act* __restrict__ y) {
  using P = Pack<Act>;
  __shared__ float scratch[kMaxWarps];
  TANDEM_DYNAMIC_SHARED(float, staged);  // [d]
  const size_t t = blockIdx.x;
  float sum_sq[1] = {0.0f};
  for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
    float v[P::N];
    P::load(u + t * d + i, v, Traffic::activation);
#pragma unroll
    for (int e = 0; e < P::N; ++e) staged[i + e] = v[e], sum_sq[0] += v[e] * v[e];
  }
  block_sum(sum_sq, scratch);
  const float rs = rsqrtf(sum_sq[0] / d + eps);
  for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
    float out[P::N];
#pragma unroll
    for (int e = 0; e < P::N; ++e) out[e] = staged[i + e] * rs;
    if constexpr (kGain) {
      float wv[P::N];
      load_floats<P::N>(w + i, wv, Traffic::weight);
#pragma unroll
      for (int e = 0; e < P::N; ++e) out[e] *= wv[e];
    }
    P::store(y + t * d + i, out, Traffic::activation);
  }
}

// post: X'[t, k] = post_k * f[t] + sum_j comb[j][k] * X[t, j]. f: [T, d].
template <class Act>
__global__ void residual_post(const Act* __restrict__ x, const Act* __restrict__ f,
                              const float* __restrict__ coef, int d, Act* __restrict__ x_next) {
  using P = Pack<Act>;
  __shared__ float c[kMixes];
  const size_t t = blockIdx.x;
  load_coefficients(coef + t * kMixes, c);
  for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
    float xv[kHc][P::N], fv[P::N];
#pragma unroll
    for (int j = 0; j < kHc; ++j) P::load(x + (t * kHc + j) * d + i, xv[j], Traffic::activation);
    P::load(f + t * d + i, fv, Traffic::activation);
#pragma unroll
    for (int k = 0; k < kHc; ++k) {
      float out[P::N];
#pragma unroll
      for (int e = 0; e < P::N; ++e) {
        out[e] = c[kPostAt + k] * fv[e];
#pragma unroll
        for (int j = 0; j < kHc; ++j) out[e] += c[kCombAt + 4 * j + k] * xv[j][e];
      }
      P::store(x_next + (t * kHc + k) * d + i, out, Traffic::activation);
    }
  }
}

// ---------------------------------------------------------------- V4.1 single pass
// At the boundary after site l (kUpdate): X_{l+1} = post/comb_l applied to (X_l, f_l), written
// once; y = RMSNorm(sum_j pre_l[j] X_{l+1}[j]) * w (the next site's collapse with the pre made at
// site l), written once; with kMixes, X_{l+1}'s own coefficients accumulate on the fly.
// Without kUpdate X_l is only read and collapsed with coef_in's pre (a site opened after an
// Engram layer), or with pre = [1,0,0,0] when coef_in is null (the model's first site).
// x: [T,4,d]; f: [T,d]; coef_in/coef_out: [T,24]; fn: [24,4d]; w: [d]; y: [T,d].
// Dynamic shared memory: [d] floats (the collapse, kept for the normalisation).
template <class Act, bool kUpdate, bool kWithMixes>
__global__ void residual_single_pass(const Act* __restrict__ x, const Act* __restrict__ f,
                                     const float* __restrict__ coef_in,
                                     const float* __restrict__ fn, const float* __restrict__ base,
                                     const float* __restrict__ scale, SinkhornParams p,
                                     const float* __restrict__ w, int d, Act* __restrict__ x_next,
                                     Act* __restrict__ y, float* __restrict__ coef_out) {
  using P = Pack<Act>;
  constexpr int kSums = kMixes + 2;  // 24 dots, sum(x^2), sum(u^2)
  __shared__ float scratch[kMaxWarps * kSums];
  __shared__ float c[kMixes];
  TANDEM_DYNAMIC_SHARED(float, collapse);  // [d]
  const size_t t = blockIdx.x;
  if (kUpdate || coef_in != nullptr) {
    load_coefficients(coef_in + t * kMixes, c);
  } else if (threadIdx.x < kHc) {
    c[kPreAt + threadIdx.x] = threadIdx.x == 0 ? 1.0f : 0.0f;
  }
  __syncthreads();
  float acc[kSums] = {};
  for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
    float xv[kHc][P::N];
#pragma unroll
    for (int j = 0; j < kHc; ++j) P::load(x + (t * kHc + j) * d + i, xv[j], Traffic::activation);
    if (kUpdate) {
      float fv[P::N], xn[kHc][P::N];
      P::load(f + t * d + i, fv, Traffic::activation);
#pragma unroll
      for (int k = 0; k < kHc; ++k) {
#pragma unroll
        for (int e = 0; e < P::N; ++e) {
          xn[k][e] = c[kPostAt + k] * fv[e];
#pragma unroll
          for (int j = 0; j < kHc; ++j) xn[k][e] += c[kCombAt + 4 * j + k] * xv[j][e];
        }
        P::store(x_next + (t * kHc + k) * d + i, xn[k], Traffic::activation);  // rounds xn
      }
#pragma unroll
      for (int k = 0; k < kHc; ++k)
#pragma unroll
        for (int e = 0; e < P::N; ++e) xv[k][e] = xn[k][e];
    }
#pragma unroll
    for (int e = 0; e < P::N; ++e) {
      float u = 0.0f;
#pragma unroll
      for (int j = 0; j < kHc; ++j) u += c[kPreAt + j] * xv[j][e];
      collapse[i + e] = u;
      acc[kMixes + 1] += u * u;
    }
    if (kWithMixes) {
#pragma unroll
      for (int k = 0; k < kHc; ++k) {
#pragma unroll
        for (int e = 0; e < P::N; ++e) acc[kMixes] += xv[k][e] * xv[k][e];
        accumulate_mixes<P::N>(acc, xv[k], fn, kHc * d, k * d + i);
      }
    }
  }
  block_sum(acc, scratch);
  const float rs = rsqrtf(acc[kMixes + 1] / d + p.norm_eps);
  for (int i = threadIdx.x * P::N; i < d; i += blockDim.x * P::N) {
    float wv[P::N], out[P::N];
    load_floats<P::N>(w + i, wv, Traffic::weight);
#pragma unroll
    for (int e = 0; e < P::N; ++e) out[e] = collapse[i + e] * rs * wv[e];
    P::store(y + t * d + i, out, Traffic::activation);
  }
  if (kWithMixes && threadIdx.x == 0)
    store_coefficients(acc, acc[kMixes], kHc * d, base, scale, p, coef_out + t * kMixes);
}

}  // namespace tandem::TANDEM_BACKEND_NS
