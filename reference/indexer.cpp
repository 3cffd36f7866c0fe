#include "reference/indexer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "reference/kvcache.hpp"  // decode_record

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

namespace {

// The i-th term a sum of n visits in `order`: 0 forwards, 1 backwards, k >= 2 from an offset of
// its own (spread by the golden ratio), backwards for even k.
size_t summation_index(size_t i, size_t n, int order) {
  if (order == 0) return i;
  if (order == 1) return n - 1 - i;
  const size_t start = size_t(double(n) * std::fmod(order * 0.6180339887, 1.0));
  return (start + (order % 2 == 0 ? n - i : i)) % n;
}

}  // namespace

template <class S>
Tensor<S> index_logits(const IndexLogitsInputs& in, int order) {
  const int64_t T = in.w.dim(0), H = in.heads, n = in.n_keys, ps = in.keys.page_size;
  const KvFormat f = in.keys.format;
  // The queries' records back to back: one page holding all of them.
  const int64_t q_page = T * H;
  std::vector<std::vector<double>> q(size_t(T * H));
  for (int64_t r = 0; r < T * H; ++r)
    q[size_t(r)] = decode_record(f, q_page, in.q_records.span(), r);
  Tensor<S> scores({T, n}, std::numeric_limits<S>::quiet_NaN());
  for (int64_t j = 0; j < n; ++j) {
    const int64_t slot = int64_t(in.page_table.data[size_t(j / ps)]) * ps + j % ps;
    const std::vector<double> k = decode_record(f, ps, in.key_pool.span(), slot);
    for (int64_t t = 0; t < T; ++t) {
      if (j >= visible_entries(in.start + t, in.ratio, n)) continue;
      S score = 0;
      for (int64_t hh = 0; hh < H; ++hh) {
        const int64_t h = int64_t(summation_index(size_t(hh), size_t(H), order));
        const std::vector<double>& qh = q[size_t(t * H + h)];
        S dot = 0;
        for (size_t ii = 0; ii < k.size(); ++ii) {
          const size_t i = summation_index(ii, k.size(), order);
          dot += S(qh[i]) * S(k[i]);
        }
        score += S(in.w.data[size_t(t * H + h)]) * (dot > 0 ? dot : S(0));  // relu; NaN -> 0
      }
      scores.data[size_t(t * n + j)] = score;
    }
  }
  return scores;
}

template Tensor<double> index_logits<double>(const IndexLogitsInputs&, int);
template Tensor<float> index_logits<float>(const IndexLogitsInputs&, int);

}  // namespace tandem::reference
