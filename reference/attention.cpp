#include "reference/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/residual.hpp"  // store

namespace tandem::reference {

namespace {

// The k-th position summed, of n visible ones.
int64_t position(PositionOrder order, int64_t k, int64_t n) {
  return order == PositionOrder::reversed  ? n - 1 - k
         : order == PositionOrder::rotated ? (k + n / 2) % n
                                           : k;
}

// Sum of terms[0..n) left to right or as a pairwise tree (halves summed recursively).
template <class S>
S sum_terms(const S* terms, int64_t n, DotOrder dot) {
  if (dot == DotOrder::sequential || n <= 2) {
    S s = 0;
    for (int64_t i = 0; i < n; ++i) s += terms[i];
    return s;
  }
  return sum_terms(terms, n / 2, dot) + sum_terms(terms + n / 2, n - n / 2, dot);
}

}  // namespace

template <class S, class Act>
Tensor<double> attention_causal(const AttentionInputs& in, PositionOrder order, DotOrder dot) {
  const int64_t T = in.q.dim(0), d = in.q.dim(1), P = in.keys.dim(0) - T, hd = d / in.heads;
  Tensor<double> o({T, d});
  auto at = [d](const Tensor<float>& m, int64_t row, int64_t col) {
    return S(m.data[row * d + col]);
  };
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < in.heads; ++h) {
      const int64_t n = P + t + 1;
      std::vector<S> p(n);
      S top = -INFINITY;
      std::vector<S> products(hd);
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < hd; ++i)
          products[i] = at(in.q, t, h * hd + i) * at(in.keys, j, h * hd + i);
        p[j] = sum_terms(products.data(), hd, dot) / std::sqrt(S(hd));
        top = std::max(top, p[j]);
      }
      S total = 0;
      for (int64_t j = 0; j < n; ++j) p[j] = std::exp(p[j] - top);
      for (int64_t k = 0; k < n; ++k) total += p[position(order, k, n)];
      for (int64_t i = 0; i < hd; ++i) {
        S acc = 0;
        for (int64_t k = 0; k < n; ++k) {
          const int64_t j = position(order, k, n);
          acc += p[j] * at(in.values, j, h * hd + i);
        }
        o.data[t * d + h * hd + i] = double(store<Act>(acc / total));
      }
    }
  return o;
}

Tensor<double> attention_truth(const AttentionInputs& in) {
  return attention_causal<double, double>(in, PositionOrder::given, DotOrder::sequential);
}

Tensor<double> attention_baseline(const AttentionInputs& in, PositionOrder order, DotOrder dot) {
  return in.act == ActDType::f32 ? attention_causal<float, float>(in, order, dot)
                                 : attention_causal<float, bf16>(in, order, dot);
}

}  // namespace tandem::reference
