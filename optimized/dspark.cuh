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
#include "optimized/residual.cuh"  // kHc, kMixes: the streams' and coefficients' layout

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

// Warp-wide argmax of p[0..V) (lowest index of the largest); every lane returns it. A row with
// no value above -inf (all -inf or NaN) gives 0, so the result is always a token.
__device__ __forceinline__ int32_t warp_argmax(const float* p, int64_t V) {
  float best = -INFINITY;
  int32_t best_v = 0;
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

// ---------------------------------------------------------------- drafting: the Markov step
// (problem/dspark.hpp MarkovDraftInputs). One warp per request, draft positions in order (each
// reads the token chosen before it); W1[x_{k-1}] is staged in this warp's shared-memory row.
// Lanes own vocabulary entries v = lane + 32 m (coalesced rows of W2), each logit one fmaf chain
// over j in order; the confidence is a warp sum.
inline constexpr int kMarkovWarpsPerBlock = 4;
static_assert(kMarkovWarpsPerBlock * kMarkovMaxRank * sizeof(float) <= 48 * 1024,
              "the staged W1 rows must fit the default 48 KiB of shared memory");

// c = sigmoid(w . [sum_s pre_s X[s] ; w1]) over X [4, d] and the staged w1 [rank].
__device__ __forceinline__ float markov_confidence(const float* x, const float* coef,
                                                   const float* w, const float* w1, int d,
                                                   int rank) {
  const int lane = threadIdx.x % kWarpSize;
  float own_pre = 0.0f;
  if (lane < kHc) own_pre = ld(coef + lane, Traffic::coefficient);
  float pre[kHc];
#pragma unroll
  for (int s = 0; s < kHc; ++s) pre[s] = __shfl_sync(0xffffffffu, own_pre, s);
  float dot = 0.0f;
  for (int i = lane; i < d; i += kWarpSize) {
    float u = 0.0f;
#pragma unroll
    for (int s = 0; s < kHc; ++s) u = fmaf(pre[s], ld(x + s * d + i, Traffic::activation), u);
    dot = fmaf(u, ld(w + i, Traffic::weight), dot);
  }
  for (int j = lane; j < rank; j += kWarpSize)
    dot = fmaf(w1[j], ld(w + d + j, Traffic::weight), dot);
  return 1.0f / (1.0f + expf(-warp_sum(dot)));
}

// base: [R, G, V]; streams: [R, G, 4, d]; coef: [R, G, 24]; w1: [V, rank]; w2: [rank, V];
// conf: [d + rank]; last, request, position: [R]; tokens: [R, K]; logits, p: [R, K, V];
// confidence: [R, K]. Dynamic shared memory: kMarkovWarpsPerBlock x rank floats.
__global__ void dspark_markov_draft(
    const float* __restrict__ base, const float* __restrict__ streams,
    const float* __restrict__ coef, const float* __restrict__ w1, const float* __restrict__ w2,
    const float* __restrict__ conf, const int32_t* __restrict__ last,
    const uint32_t* __restrict__ request, const uint32_t* __restrict__ position, int R, int G,
    int K, int64_t V, int d, int rank, uint64_t seed, bool greedy, float temperature,
    int32_t* __restrict__ tokens, float* __restrict__ logits, float* __restrict__ p,
    float* __restrict__ confidence) {
  TANDEM_DYNAMIC_SHARED(float, staged);  // [warps, rank]
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int r = blockIdx.x * kMarkovWarpsPerBlock + warp;
  if (r >= R) return;  // whole warps: one request per warp
  float* row = staged + warp * rank;
  int32_t previous = warp_request_word(last, r, 0);
  const uint32_t id = warp_request_word(request, r, 0u), pos0 = warp_request_word(position, r, 0u);
  const float t = greedy ? 1.0f : temperature;
  for (int k = 0; k < K; ++k) {
    for (int j = lane; j < rank; j += kWarpSize)
      row[j] = ld(w1 + static_cast<size_t>(previous) * rank + j, Traffic::weight);
    __syncwarp();
    const size_t at = static_cast<size_t>(r) * G + k, out = static_cast<size_t>(r) * K + k;
    const float* b = base + at * V;
    float* l = logits + out * V;
    float* pk = p + out * V;
    float top = -INFINITY;
    for (int64_t v = lane; v < V; v += kWarpSize) {
      float acc = ld(b + v, Traffic::activation);
      for (int j = 0; j < rank; ++j)
        acc = fmaf(row[j], ld(w2 + static_cast<size_t>(j) * V + v, Traffic::weight), acc);
      st(l + v, acc, Traffic::activation);
      top = fmaxf(top, acc);
    }
    top = warp_max(top);
    const float c =
        markov_confidence(streams + at * kHc * d, coef + at * kMixes, conf, row, d, rank);
    if (lane == 0) st(confidence + out, c, Traffic::activation);
    float sum = 0.0f;  // softmax(l / t): each lane rereads its own logits
    for (int64_t v = lane; v < V; v += kWarpSize)
      sum += expf((ld(l + v, Traffic::activation) - top) / t);
    sum = warp_sum(sum);
    for (int64_t v = lane; v < V; v += kWarpSize)
      st(pk + v, expf((ld(l + v, Traffic::activation) - top) / t) / sum, Traffic::activation);
    __syncwarp();  // the rows are the warp's to read
    previous = greedy ? warp_argmax(l, V)
                      : warp_inverse_cdf(pk, nullptr, V,
                                         philox_uniform(philox_draw(seed, id, pos0 + k, 2).v[0]));
    if (lane == 0) st(tokens + out, previous, Traffic::activation);
    __syncwarp();  // every lane is done with this row of W1 before the next is staged
  }
}

}  // namespace tandem::TANDEM_BACKEND_NS
