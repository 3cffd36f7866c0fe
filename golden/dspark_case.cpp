#include "golden/dspark_case.hpp"

#include "core/philox.hpp"
#include "reference/dspark.hpp"

namespace tandem {

std::vector<float> seeded_distribution(int64_t V, uint64_t seed, uint32_t id) {
  std::vector<float> p(V);
  float sum = 0;
  for (int64_t v = 0; v < V; ++v) {
    const uint32_t w = philox_draw(seed, id, uint32_t(v)).v[0];
    p[v] = (w % 7 == 0) ? 0.0f : philox_uniform(w) + 0.01f;
    sum += p[v];
  }
  for (float& x : p) x = sum > 0 ? x / sum : 1.0f / V;
  return p;
}

VerifyInputs make_verify_inputs(int64_t R, int K, int64_t V, uint64_t seed, bool greedy) {
  VerifyInputs in;
  in.requests = R, in.vocab = V, in.budget = K, in.seed = seed, in.greedy = greedy;
  in.draft = Tensor<int32_t>({R, K});
  in.p_draft = Tensor<float>({R, K, V});
  in.p_target = Tensor<float>({R, K + 1, V});
  for (int64_t r = 0; r < R; ++r) {
    in.position.push_back(uint32_t(100 + 7 * r));
    for (int k = 0; k <= K; ++k) {
      const auto t = seeded_distribution(V, seed, uint32_t(1000 + r * 16 + k));
      std::copy(t.begin(), t.end(), in.p_target.ptr() + (r * (K + 1) + k) * V);
      if (k == K) continue;
      // The drafter: often close to the target (mixing), so that acceptances happen.
      const auto d = seeded_distribution(V, seed, uint32_t(2000 + r * 16 + k));
      float* pd = in.p_draft.ptr() + (r * K + k) * V;
      for (int64_t v = 0; v < V; ++v) pd[v] = 0.7f * t[v] + 0.3f * d[v];
      // Drafted token: drawn from the draft distribution (greedy: its argmax, sometimes wrong).
      in.draft.data[r * K + k] =
          greedy ? (r % 3 ? reference::argmax(t) : reference::argmax({pd, size_t(V)}))
                 : reference::inverse_cdf(
                       {pd, size_t(V)},
                       philox_uniform(philox_draw(seed, 9, uint32_t(r * 16 + k)).v[0]));
    }
  }
  return in;
}

}  // namespace tandem
