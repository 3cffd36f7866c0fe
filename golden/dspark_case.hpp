#pragma once
// DSpark cases: seeded verification inputs (target and draft distributions, drafted tokens) and
// speculative decoding of the small backbone with the DSpark drafter, shared by golden files,
// `tandem verify` and tests.
#include <cstdint>

#include "core/dspark_config.hpp"
#include "optimized/dspark.hpp"
#include "reference/backbone.hpp"

namespace tandem {

// A seeded distribution over V tokens (about one in seven zero), normalised in float.
std::vector<float> seeded_distribution(int64_t V, uint64_t seed, uint32_t id);
// R requests with K drafted tokens each: drafts mix the target (70%) with another distribution;
// sampled tokens are drawn from the draft, greedy ones are the target's argmax for two requests
// in three and the draft's otherwise.
VerifyInputs make_verify_inputs(int64_t R, int K, int64_t V, uint64_t seed, bool greedy);

// The steps-per-second profile the decode schedules against: a step's time grows by 1/16 for
// each token it verifies (a stand-in for a profiled curve), sps[n] for n = 0..max_tokens.
std::vector<double> dspark_sps_profile(int max_tokens);

// Speculative decoding of `steps` tokens: the config's backbone and drafter (weights from
// `seed`), the drafter reading the backbone's target features and proposing gamma tokens, the
// scheduler admitting a prefix of them by their confidences (at least one), each pass checked
// by `verify`.
struct DsparkDecode {
  std::vector<int32_t> prompt, text;
  std::vector<int> admitted;  // per pass: drafts the scheduler sent to verification
  std::vector<int> accepted;  // per pass: drafts verification accepted
  int passes = 0;
};
DsparkDecode dspark_decode(const DsparkConfig& c, uint64_t seed, bool greedy, int steps,
                           const reference::Verifier& verify);

}  // namespace tandem
