#include "sim/dspark_traffic.hpp"

#include <algorithm>

#include "core/dspark_config.hpp"

namespace tandem::sim {
namespace {

constexpr uint64_t kWord = 4;  // int32 tokens, uint32 positions and float probabilities

// A warp inverse CDF that lands on `found`: every lane sums its block of the weights once, then
// the owning lane rescans its block up to and including `found`. `arrays`: 2 for the residual
// max(0, p_t - p_d), 1 for p_t alone.
uint64_t inverse_cdf_bytes(int64_t V, int32_t found, uint64_t arrays) {
  const int64_t block = (V + 31) / 32, begin = found / block * block;
  return uint64_t(V + found - begin + 1) * arrays * kWord;
}

// Whether the residual max(0, p_t - p_d) of one row has mass <= kResidualMassFloor, summed as the
// kernel sums it (32 contiguous blocks, blocks in order): the draw then rescans p_t alone.
bool residual_is_empty(const float* p_t, const float* p_d, int64_t V) {
  const int64_t block = (V + 31) / 32;
  float total = 0;
  for (int64_t begin = 0; begin < V; begin += block) {
    float part = 0;
    for (int64_t v = begin; v < std::min(V, begin + block); ++v)
      part += std::max(0.0f, p_t[v] - p_d[v]);
    total += part;
  }
  return total <= kResidualMassFloor;
}

// The draw at a rejection in row k: over the residual, or, when it is empty, one pass summing
// it and then the draw over p_t alone.
uint64_t rejection_draw_bytes(const VerifyInputs& in, int64_t r, int64_t k, int32_t found) {
  const int64_t K = in.budget, V = in.vocab;
  const float* p_t = in.p_target.ptr() + (r * (K + 1) + k) * V;
  const float* p_d = in.p_draft.ptr() + (r * K + k) * V;
  if (residual_is_empty(p_t, p_d, V))
    return uint64_t(V) * 2 * kWord + inverse_cdf_bytes(V, found, 1);
  return inverse_cdf_bytes(V, found, 2);
}

}  // namespace

LaunchLog predict_dspark_verify(const VerifyInputs& in, const VerifyOutputs& decisions) {
  constexpr int A = int(Traffic::activation), C = int(Traffic::coefficient);
  const int64_t K = in.budget, V = in.vocab;
  LaunchCounts c{"dspark_verify"};
  for (int64_t r = 0; r < in.requests; ++r) {
    const int64_t a = decisions.accepted[r];
    const int64_t k_r = in.drafted.empty() ? K : in.drafted[r];
    const int32_t extra = decisions.emitted.data[r * (K + 1) + a];
    const bool rejected = a < k_r;
    // The position, the optional count and id; each decided draft token; the accepted ones
    // again when they are emitted.
    const uint64_t request_words = 1 + !in.drafted.empty() + !in.request.empty();
    c.read[C] += kWord * (request_words + uint64_t(a + (rejected ? 1 : 0) + a));
    if (in.greedy) {
      c.read[A] += uint64_t(a + 1) * V * kWord;  // one argmax over p_t per decided row
    } else {
      c.read[A] += uint64_t(a + (rejected ? 1 : 0)) * 2 * kWord;  // p_d(x), p_t(x)
      c.read[A] +=
          rejected ? rejection_draw_bytes(in, r, a, extra) : inverse_cdf_bytes(V, extra, 1);
    }
    c.written[A] += kWord * uint64_t(1 + K + 1);  // accepted, emitted row
  }
  return {c};
}

}  // namespace tandem::sim
