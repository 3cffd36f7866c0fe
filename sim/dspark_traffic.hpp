#pragma once
// Byte model of the DSpark kernels (verification, the drafter's Markov step) and of the drafter's
// whole run on the model's kernels; must equal the emulator's counts exactly. Verification's and
// a sampled draft's reads depend on the decisions (how far each request gets, where the inverse
// CDF lands), so the model takes them and the distributions drawn from as input: it predicts
// bytes, not outcomes.
#include "core/dspark_config.hpp"
#include "problem/drafter.hpp"  // DraftChoice
#include "problem/dspark.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

LaunchLog predict_dspark_verify(const VerifyInputs& in, const VerifyOutputs& decisions);

// dspark_markov_draft over `in`'s shapes and draws' keys; `p` [R, K, V] the distributions the
// run drew from (a sampled draw's inverse CDF reads as far as they and its uniform take it).
LaunchCounts predict_markov_draft(const MarkovDraftInputs& in, const Tensor<float>& p);

// optimized/drafter.hpp's run_drafter: the pass after T cached feature rows of feature_dim, then
// K drafted tokens chosen as `choice` says (p: the run's "draft.p" [K, V]; only a sampled draw's
// bytes depend on it).
LaunchLog predict_drafter(const DsparkConfig& c, int64_t feature_dim, int64_t T, int K,
                          const DraftChoice& choice, const Tensor<float>& p);

}  // namespace tandem::sim
