#include "golden/dspark_case.hpp"

#include <algorithm>

#include "core/philox.hpp"
#include "reference/drafter.hpp"
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

void schedule_batch(VerifyInputs& in, uint64_t seed) {
  in.drafted.clear(), in.request.clear();
  for (int64_t r = 0; r < in.requests; ++r) {
    in.drafted.push_back(int32_t(r % (in.budget + 1)));
    // Distinct: 7919 is odd, so equal ids would need 2^16 to divide the difference of slots.
    const uint32_t w = philox_draw(seed, 11, uint32_t(r)).v[0];
    in.request.push_back(uint32_t(r) * 7919u + (w & 0xffu) * 65536u);
  }
}

std::vector<double> dspark_sps_profile(int max_tokens) {
  std::vector<double> sps(max_tokens + 1);
  for (int n = 0; n <= max_tokens; ++n) sps[n] = 1.0 / (1.0 + n / 16.0);
  return sps;
}

bool pass_counts_hold(const reference::SpeculativeStats& s, int budget, bool reached_limit) {
  for (size_t p = 0; p < s.accepted_per_step.size(); ++p) {
    const bool last = p + 1 == s.accepted_per_step.size();
    if (s.accepted_per_step[p] < 0 || s.accepted_per_step[p] > s.admitted_per_step[p] ||
        s.admitted_per_step[p] > budget)
      return false;
    if (s.emitted_per_step[p] != s.accepted_per_step[p] + 1 && !(last && reached_limit))
      return false;
  }
  return true;
}

DsparkDecode dspark_decode(const DsparkConfig& c, uint64_t seed, int requests, bool greedy,
                           int steps, const reference::Verifier& verify) {
  const reference::DsparkDrafter drafter(c, 3 * c.backbone_width, seed);
  std::vector<reference::TinyBackbone> models;  // one cache per request, the same weights
  for (int r = 0; r < requests; ++r)
    models.emplace_back(c.vocab, c.backbone_width, seed, c.backbone_layers);
  DsparkDecode d;
  std::vector<reference::BatchRequest> batch;
  for (int r = 0; r < requests; ++r) {
    std::vector<int32_t> prompt;
    for (uint32_t i = 0; i < 6; ++i)
      prompt.push_back(
          int32_t(philox_draw(seed, 7, uint32_t(r) * 16 + i).v[0] % uint32_t(c.vocab)));
    d.prompt.push_back(prompt);
    const reference::Backbone* model = &models[r];
    batch.push_back({&models[r], prompt, [=, &drafter](const std::vector<int32_t>& text, int K) {
                       const reference::DraftChoice choice{greedy, seed, uint32_t(r),
                                                           uint32_t(text.size()), c.temperature};
                       const reference::Draft draft =
                           drafter.propose(model->target_features(), text.back(), K, choice);
                       return reference::Proposal{draft.tokens, draft.p_draft, draft.confidence};
                     }});
  }
  d.decode = reference::speculative_batch_decode(
      batch, steps, [&](int) { return c.gamma; },
      reference::scheduler_admission(dspark_sps_profile(requests * (1 + c.gamma))),
      {seed, c.temperature, greedy}, verify);
  return d;
}

}  // namespace tandem
