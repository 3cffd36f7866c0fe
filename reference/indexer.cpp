#include "reference/indexer.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace tandem::reference {

Tensor<int32_t> topk_select(const TopkInputs& in) {
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1), k = in.top_k;
  Tensor<int32_t> out({T, k}, -1);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = in.scores.ptr() + t * N;
    std::vector<int32_t> visible(size_t(in.lengths.data[size_t(t)]));
    std::iota(visible.begin(), visible.end(), 0);
    std::stable_sort(visible.begin(), visible.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b];
    });  // ties keep index order
    for (int64_t i = 0; i < std::min<int64_t>(k, int64_t(visible.size())); ++i)
      out.data[size_t(t * k + i)] = visible[size_t(i)];
  }
  return out;
}

}  // namespace tandem::reference
