#pragma once
// DSpark verification as data (DESIGN 5.4): for each request, K drafted tokens are
// checked against the backbone's distributions in one pass; the step emits the accepted prefix
// plus one token (the residual resample at the first rejection, or the bonus).
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/dspark_config.hpp"  // kDsparkMaxDraft
#include "core/tensor.hpp"
#include "problem/traffic.hpp"

namespace tandem {

struct VerifyInputs {
  int64_t requests = 0, vocab = 0;
  int budget = 0;                  // K: drafted rows per request (1..8)
  Tensor<int32_t> draft;           // [R, K] drafted token ids
  Tensor<float> p_draft;           // [R, K, V] the drafter's distributions they were drawn from
  Tensor<float> p_target;          // [R, K + 1, V] the backbone's, row k_r for the bonus
  std::vector<uint32_t> position;  // [R] sequence position of the first drafted token
  uint64_t seed = 0;               // Philox key: draws keyed by (seed, request, position)
  bool greedy = false;             // temperature 0
  // Optional, for a scheduled batch: drafted [R] = k_r in [0, K] verified for request r (empty:
  // K for all; rows past k_r are padding, never read); request [R] = the id that keys request
  // r's draws (empty: r), so a request draws the same whichever batch slot it has.
  std::vector<int32_t> drafted;
  std::vector<uint32_t> request;
};

// Every input tensor with its name (the golden blob's tensor names); the scheduled batch's drafted
// and request only when given. The sizes, seed and greedy come from the config.
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, VerifyInputs>
void for_each_tensor(Input& in, F&& f) {
  f("draft", in.draft);
  f("p_draft", in.p_draft);
  f("p_target", in.p_target);
  f("position", in.position);
  if (!in.drafted.empty()) f("drafted", in.drafted);
  if (!in.request.empty()) f("request", in.request);
}

struct VerifyOutputs {
  std::vector<int32_t> accepted;  // [R] in [0, k_r]
  Tensor<int32_t> emitted;        // [R, K + 1]: accepted prefix, then the extra token; -1 after
  LaunchLog launches;
};

// BadInput naming the tensor: shapes the kernel supports, valid values.
void validate_verify_inputs(const VerifyInputs& in);

// DSpark's Markov head and confidence head after a drafter pass (DESIGN 5.4), left to right per
// request: for k = 0..K-1, with x_{-1} = last,
//   logits_k = base_k + sum_j W1[x_{k-1}, j] W2[j, :] (j in order),
//   p_k = softmax(logits_k / t) (t = 1 when greedy), x_k = argmax logits_k (lower index on
//   ties) or the inverse CDF of p_k at the uniform of Philox (seed, request, position + k,
//   stream 2) (32 contiguous blocks, as verification draws),
//   c_k = sigmoid(w . [u_k ; W1[x_{k-1}]]), u_k = sum_s pre_s X_k[s] the collapsed hidden before
//   the head's norm (pre: the last site's, coef[0:4]).
struct MarkovDraftInputs {
  int64_t requests = 0;
  int budget = 0;                           // K tokens drafted per request (1..gamma)
  Tensor<float> base;                       // [R, gamma, V] the pass's logits
  Tensor<float> streams;                    // [R, gamma, 4, width] after the last stage
  Tensor<float> coef;                       // [R, gamma, 24] the last site's coefficients
  Tensor<float> markov_in;                  // W1 [V, r]
  Tensor<float> markov_out;                 // W2 [r, V]
  Tensor<float> confidence;                 // w [width + r]
  std::vector<int32_t> last;                // [R]
  std::vector<uint32_t> request, position;  // [R] the draws' keys
  uint64_t seed = 0;
  bool greedy = true;
  float temperature = 1;
};
struct MarkovDraftOutputs {
  Tensor<int32_t> tokens;    // [R, K]
  Tensor<float> logits;      // [R, K, V] with the Markov head
  Tensor<float> p;           // [R, K, V] the distributions the tokens came from
  Tensor<float> confidence;  // [R, K] c_k
  LaunchLog launches;
};
// BadInput naming the tensor: shapes, rank <= kMarkovMaxRank, tokens in range, finite values.
void validate_markov_draft_inputs(const MarkovDraftInputs& in);

// The DSpark drafter's inputs for one pass (its weights come from the config's seed): the
// backbone's target features over the window, and the last token.
struct DrafterInputs {
  Tensor<double> features;  // [T >= 1, 3 * backbone_width]
  Tensor<int32_t> last;     // [1]
};

// Every input tensor with its name (the golden blob's tensor names).
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, DrafterInputs>
void for_each_tensor(Input& in, F&& f) {
  f("features", in.features);
  f("last", in.last);
}

}  // namespace tandem
