#include "reference/indexer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "reference/kvcache.hpp"  // decode_record

namespace tandem::reference {

namespace {

// `entries` (ascending) sorted by score, descending; ties keep their order: the lower index.
void sort_by_score(std::vector<int32_t>& entries, const float* row) {
  std::stable_sort(entries.begin(), entries.end(),
                   [&](int32_t a, int32_t b) { return row[a] > row[b]; });
}

// The first k of `chosen` into row t of out [T, k] (-1 filled).
void write_row(Tensor<int32_t>& out, int64_t t, const std::vector<int32_t>& chosen) {
  const int64_t k = out.dim(1);
  for (int64_t i = 0; i < std::min<int64_t>(k, int64_t(chosen.size())); ++i)
    out.data[size_t(t * k + i)] = chosen[size_t(i)];
}

}  // namespace

Tensor<int32_t> topk_select(const TopkInputs& in) {
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1);
  Tensor<int32_t> out({T, in.top_k}, -1);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> visible(size_t(in.lengths.data[size_t(t)]));
    std::iota(visible.begin(), visible.end(), 0);
    sort_by_score(visible, in.scores.ptr() + t * N);
    write_row(out, t, visible);
  }
  return out;
}

Tensor<int32_t> candidate_blocks(const CandidateBlocksInputs& in) {
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1);
  Tensor<int32_t> out({T, in.keep}, -1);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t len = in.lengths.data[size_t(t)];
    const int32_t n_blocks = (len + in.block - 1) / in.block;
    if (n_blocks == 0) continue;
    const float* row = in.scores.ptr() + t * N;
    std::vector<float> best(size_t(n_blocks), -std::numeric_limits<float>::infinity());
    for (int32_t j = 0; j < len; ++j)
      best[size_t(j / in.block)] = std::max(best[size_t(j / in.block)], row[j]);
    std::vector<int32_t> others(size_t(n_blocks - 1));  // every block but the newest
    std::iota(others.begin(), others.end(), 0);
    sort_by_score(others, best.data());
    others.resize(std::min(others.size(), size_t(in.keep - 1)));
    others.push_back(n_blocks - 1);  // pinned
    std::sort(others.begin(), others.end());
    write_row(out, t, others);
  }
  return out;
}

Tensor<int32_t> candidate_topk(const CandidateTopkInputs& in) {
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1), C = in.blocks.dim(1);
  Tensor<int32_t> out({T, in.top_k}, -1);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t len = in.lengths.data[size_t(t)];
    std::vector<int32_t> entries;
    for (int64_t i = 0; i < candidate_count(in, t); ++i) {
      const int32_t b = in.blocks.data[size_t(t * C + i)];
      for (int32_t j = b * in.block; j < std::min(len, (b + 1) * in.block); ++j)
        entries.push_back(j);
    }
    sort_by_score(entries, in.scores.ptr() + t * N);
    write_row(out, t, entries);
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
        const S weight = S(in.w.data[size_t(t * H + h)]) * S(in.weight_scale);
        score += weight * (dot > 0 ? dot : S(0));  // relu; NaN -> 0
      }
      scores.data[size_t(t * n + j)] = score;
    }
  }
  return scores;
}

template Tensor<double> index_logits<double>(const IndexLogitsInputs&, int);
template Tensor<float> index_logits<float>(const IndexLogitsInputs&, int);

}  // namespace tandem::reference
