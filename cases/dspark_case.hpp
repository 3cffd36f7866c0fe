#pragma once
// DSpark cases: seeded verification inputs (target and draft distributions, drafted tokens) and
// speculative decoding of the small backbone with the DSpark drafter, shared by golden files,
// `tandem verify` and tests.
#include <cstdint>

#include "cases/tensor_check.hpp"
#include "core/dspark_config.hpp"
#include "optimized/dspark.hpp"
#include "problem/model.hpp"
#include "reference/backbone.hpp"
#include "reference/drafter.hpp"

namespace tandem {

// A seeded distribution over V tokens (about one in seven zero), normalised in float.
std::vector<float> seeded_distribution(int64_t V, uint64_t seed, uint32_t id);
// R requests with K drafted tokens each: drafts mix the target (70%) with another distribution;
// sampled tokens are drawn from the draft, greedy ones are the target's argmax for two requests
// in three and the draft's otherwise.
VerifyInputs make_verify_inputs(int64_t R, int K, int64_t V, uint64_t seed, bool greedy);
// Makes `in` a scheduled batch's: request r verifies drafted[r] = r mod (K + 1) of its rows
// (every count from 0 to K) and draws with a seeded, distinct id.
void schedule_batch(VerifyInputs& in, uint64_t seed);

// The steps-per-second profile the decode schedules against: a step's time grows by 1/16 for
// each token it verifies (a stand-in for a profiled curve), sps[n] for n = 0..max_tokens.
std::vector<double> dspark_sps_profile(int max_tokens);

// One request's passes keep DSpark's counts: 0 <= accepted <= admitted <= budget and emitted ==
// accepted + 1, except a last pass cut short because the text reached its length
// (`reached_limit`).
bool pass_counts_hold(const reference::SpeculativeStats& s, int budget, bool reached_limit);

// Scheduled speculative decoding of a batch: `requests` seeded prompts of 6 tokens, each with
// its own cache of the config's backbone (weights from `seed`) and `drafter` reading that
// cache's target features and proposing gamma tokens with confidences; the scheduler admits a
// prefix of each by the confidences against dspark_sps_profile; every pass is one batched
// `verify`.
struct DsparkDecode {
  std::vector<std::vector<int32_t>> prompt;  // [R]
  reference::BatchDecode decode;
};
// The drafter's proposals of decodes of one batch (config, drafter, seed, mode), by request,
// text and budget: decodes whose verifiers decide alike (the reference, the kernel under each
// schedule) ask the drafter the same questions, and its passes are most of a decode's cost.
// One thread at a time.
using DraftMemo = std::map<std::tuple<int, std::vector<int32_t>, int>, reference::Proposal>;
DsparkDecode dspark_decode(const DsparkConfig& c, const reference::DsparkDrafter& drafter,
                           uint64_t seed, int requests, bool greedy, int steps,
                           const reference::Verifier& verify, DraftMemo* memo = nullptr);

// What a decode measured of its drafts: per draft position k the acceptance given that the
// drafts before it were accepted (accepted at k / verified up to k with 0..k-1 accepted; 0 where
// no pass reached k), and the tokens each request's pass emitted, on average.
struct AcceptanceProfile {
  std::vector<double> per_position;  // [gamma]
  std::vector<int64_t> reached;      // [gamma] the passes that verified position k
  double tokens_per_pass = 0;
};
AcceptanceProfile acceptance_profile(const reference::BatchDecode& d, int gamma);

// The optimized drafter (optimized/drafter.hpp: its pass and K drafted tokens) of `drafter`'s
// weights on `features` (read as float) after `last` against the reference: truth and baseline
// read the run's records, queries and attention outputs (model_forced_taps) and follow its
// drafted tokens, and are compared with it tap by tap by the end-to-end model's rules
// (compare_model: the tokens exact; the baseline widened where a tolerance check fails).
// Features [T, F] as the kernels read them: float, row-major.
Tensor<float> float_rows(const Eigen::MatrixXd& m);
// A drafter run's "draft.p" tap (the distributions its tokens came from), or an empty [0] one.
Tensor<float> drafted_p(const ModelRun& run);
struct DrafterCheck {
  ModelRun run;
  std::vector<TensorCheck> checks;
};
DrafterCheck check_drafter(const reference::DsparkDrafter& drafter, const Eigen::MatrixXd& features,
                           int32_t last, int64_t first, int K, const DraftChoice& choice,
                           const RunOptions& opt);

}  // namespace tandem
