#include "problem/dspark.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <tuple>

#include "core/error.hpp"

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

}  // namespace tandem
