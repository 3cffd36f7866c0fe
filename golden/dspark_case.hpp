#pragma once
// DSpark cases: seeded verification inputs (target and draft distributions, drafted tokens).
#include <cstdint>

#include "optimized/dspark.hpp"

namespace tandem {

// A seeded distribution over V tokens (about one in seven zero), normalised in float.
std::vector<float> seeded_distribution(int64_t V, uint64_t seed, uint32_t id);
// R requests with K drafted tokens each: drafts mix the target (70%) with another distribution;
// sampled tokens are drawn from the draft, greedy ones are the target's argmax for two requests
// in three and the draft's otherwise.
VerifyInputs make_verify_inputs(int64_t R, int K, int64_t V, uint64_t seed, bool greedy);

}  // namespace tandem
