#include "reference/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "reference/residual.hpp"  // store

namespace tandem::reference {

template <class S, class Act>
Tensor<double> attention_causal(const AttentionInputs& in) {
  const int64_t T = in.q.dim(0), d = in.q.dim(1), P = in.keys.dim(0) - T, hd = d / in.heads;
  Tensor<double> o({T, d});
  auto at = [d](const Tensor<float>& m, int64_t row, int64_t col) { return S(m.data[row * d + col]); };
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < in.heads; ++h) {
      const int64_t n = P + t + 1;
      std::vector<S> p(n);
      S top = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        S s = 0;
        for (int64_t i = 0; i < hd; ++i) s += at(in.q, t, h * hd + i) * at(in.keys, j, h * hd + i);
        p[j] = s / std::sqrt(S(hd));
        top = std::max(top, p[j]);
      }
      S total = 0;
      for (int64_t j = 0; j < n; ++j) total += (p[j] = std::exp(p[j] - top));
      for (int64_t i = 0; i < hd; ++i) {
        S acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += p[j] * at(in.values, j, h * hd + i);
        o.data[t * d + h * hd + i] = double(store<Act>(acc / total));
      }
    }
  return o;
}

Tensor<double> attention_truth(const AttentionInputs& in) {
  return attention_causal<double, double>(in);
}

Tensor<double> attention_baseline(const AttentionInputs& in) {
  return in.act == ActDType::f32 ? attention_causal<float, float>(in)
                                 : attention_causal<float, bf16>(in);
}

}  // namespace tandem::reference
