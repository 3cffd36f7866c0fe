#include "problem/indexer.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"

namespace tandem {

void validate_topk_inputs(const TopkInputs& in) {
  if (in.scores.shape.size() != 2 || in.scores.dim(0) < 1 || in.scores.dim(1) < 1 ||
      in.scores.dim(0) > (int64_t{1} << 24) || in.scores.dim(1) > (int64_t{1} << 30))
    throw_bad_input("topk input 'scores': expected [T in [1, 2^24], N in [1, 2^30]]");
  if (in.top_k < 1 || in.top_k > kTopkMax)
    throw_bad_input("topk: top_k {} outside [1, {}]", in.top_k, kTopkMax);
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1);
  if (in.lengths.shape != Shape{T})
    throw_bad_input("topk input 'lengths': expected [{}] (one per row of scores)", T);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t len = in.lengths.data[size_t(t)];
    if (len < 0 || len > N)
      throw_bad_input("topk input 'lengths'[{}] = {}: outside [0, {}]", t, len, N);
    for (int64_t j = 0; j < len; ++j) {
      const float s = in.scores.data[size_t(t * N + j)];
      if (!std::isfinite(s))
        throw_bad_input("topk input 'scores'[{}, {}] is {} (within the row's length)", t, j, s);
    }
  }
}

}  // namespace tandem
