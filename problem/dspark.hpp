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
