#include "problem/dspark.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <tuple>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {

void validate_verify_inputs(const VerifyInputs& in) {
  const int64_t R = in.requests, V = in.vocab, K = in.budget;
  if (R < 1 || V < 1 || V > (int64_t{1} << 31) || K < 1 || K > kDsparkMaxDraft)
    throw_bad_input("dspark verify: requests >= 1, vocab in [1, 2^31], budget in [1, {}]",
                    kDsparkMaxDraft);
  if (in.draft.shape != Shape{R, K} || in.p_draft.shape != Shape{R, K, V} ||
      in.p_target.shape != Shape{R, K + 1, V} || in.position.size() != size_t(R))
    throw_bad_input(
        "dspark verify: expected draft [R, K], p_draft [R, K, V], p_target [R, K+1, V], position "
        "[R]");
  if (!in.drafted.empty() && in.drafted.size() != size_t(R))
    throw_bad_input("dspark verify: drafted holds {} counts for {} requests", in.drafted.size(), R);
  if (!in.request.empty() && in.request.size() != size_t(R))
    throw_bad_input("dspark verify: request holds {} ids for {} requests", in.request.size(), R);
  for (int64_t r = 0; r < int64_t(in.drafted.size()); ++r)
    if (in.drafted[r] < 0 || in.drafted[r] > K)
      throw_bad_input("dspark verify: drafted[{}] is {}, outside [0, budget {}]", r, in.drafted[r],
                      K);
  for (int64_t i = 0; i < in.draft.size(); ++i)  // padding too: every row must be a valid input
    if (in.draft.data[i] < 0 || in.draft.data[i] >= V)
      throw_bad_input("dspark verify: drafted token {} of request {} is {}, outside [0, {})", i % K,
                      i / K, in.draft.data[i], V);
  for (const auto& [name, p, rows] :
       {std::tuple{"p_draft", &in.p_draft, K}, std::tuple{"p_target", &in.p_target, K + 1}})
    for (int64_t i = 0; i < p->size(); ++i)
      if (!(p->data[i] >= 0.0f && p->data[i] <= 1.0f))
        throw_bad_input("dspark verify: {}[{}, {}, {}] is {} (a probability, must be in [0, 1])",
                        name, i / (rows * V), i / V % rows, i % V, p->data[i]);
}

void validate_markov_draft_inputs(const MarkovDraftInputs& in) {
  const int64_t R = in.requests, K = in.budget;
  if (in.base.shape.size() != 3 || in.base.dim(0) != R || R < 1)
    throw_bad_input("dspark markov draft input 'base': expected [requests >= 1, gamma, V]");
  const int64_t G = in.base.dim(1), V = in.base.dim(2);
  if (K < 1 || K > G || V < 1 || V > (int64_t{1} << 31))
    throw_bad_input(
        "dspark markov draft: budget {} must be in [1, gamma {}], vocab {} in [1, 2^31]", K, G, V);
  if (in.streams.shape.size() != 4 || in.streams.dim(0) != R || in.streams.dim(1) != G ||
      in.streams.dim(2) != 4 || in.streams.dim(3) < 1)
    throw_bad_input("dspark markov draft input 'streams': expected [{}, {}, 4, width]", R, G);
  const int64_t d = in.streams.dim(3);
  if (in.coef.shape != Shape{R, G, 24})
    throw_bad_input("dspark markov draft input 'coef': expected [{}, {}, 24]", R, G);
  if (in.markov_in.shape.size() != 2 || in.markov_in.dim(0) != V || in.markov_in.dim(1) < 1 ||
      in.markov_in.dim(1) > kMarkovMaxRank)
    throw_bad_input("dspark markov draft input 'markov_in': expected [{}, r], r in [1, {}]", V,
                    kMarkovMaxRank);
  const int64_t r = in.markov_in.dim(1);
  if (in.markov_out.shape != Shape{r, V})
    throw_bad_input("dspark markov draft input 'markov_out': expected [{}, {}]", r, V);
  if (in.confidence.shape != Shape{d + r})
    throw_bad_input("dspark markov draft input 'confidence': expected [{}]", d + r);
  if (in.last.size() != size_t(R) || in.request.size() != size_t(R) ||
      in.position.size() != size_t(R))
    throw_bad_input("dspark markov draft inputs 'last', 'request', 'position': [{}] each", R);
  for (size_t i = 0; i < in.last.size(); ++i)
    if (in.last[i] < 0 || in.last[i] >= V)
      throw_bad_input("dspark markov draft input 'last'[{}] is {}, outside [0, {})", i, in.last[i],
                      V);
  if (!in.greedy && !(in.temperature > 0 && std::isfinite(in.temperature)))
    throw_bad_input("dspark markov draft: temperature {} must be finite and > 0", in.temperature);
  const std::pair<const char*, const Tensor<float>*> tensors[] = {
      {"base", &in.base},           {"streams", &in.streams},       {"coef", &in.coef},
      {"markov_in", &in.markov_in}, {"markov_out", &in.markov_out}, {"confidence", &in.confidence}};
  for (const auto& [name, t] : tensors) require_finite(*t, "dspark markov draft input", name);
}

}  // namespace tandem
