#pragma once
// Byte model of the DSpark kernels (verification, the drafter's Markov step) and of the drafter's
// whole run on the model's kernels; must equal the emulator's counts exactly. Verification's and
// a sampled draft's reads depend on the decisions (how far each request gets, which token the
// inverse CDF lands on), so the model takes them as input: it predicts bytes, not outcomes.
#include <vector>

#include "core/dspark_config.hpp"
#include "problem/dspark.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

LaunchLog predict_dspark_verify(const VerifyInputs& in, const VerifyOutputs& decisions);

// dspark_markov_draft over `in`'s shapes; `tokens` [R, K] the drawn tokens (a sampled draw's
// inverse CDF reads up to the token it lands on).
LaunchCounts predict_markov_draft(const MarkovDraftInputs& in, const Tensor<int32_t>& tokens);

// optimized/drafter.hpp's run_drafter: the pass after T cached feature rows of feature_dim, then
// K drafted tokens (tokens: the run's, [K]; only a sampled draw's bytes depend on them).
LaunchLog predict_drafter(const DsparkConfig& c, int64_t feature_dim, int64_t T, int K, bool greedy,
                          const std::vector<int32_t>& tokens);

}  // namespace tandem::sim
