#include "reference/moe.hpp"

#include <cmath>

#include "reference/residual.hpp"  // naive_dot, store

namespace tandem::reference {

template <class S, class Act>
Tensor<double> moe_experts(const MoeExpertInputs& in) {
  const int64_t T = in.y.dim(0), d = in.y.dim(1), k = in.experts.dim(1), H = in.w_in.dim(1) / 2;
  Tensor<double> f({T, d});
  for (int64_t t = 0; t < T; ++t) {
    const Vec<S> y = Eigen::Map<const Eigen::VectorXf>(in.y.ptr() + t * d, d).cast<S>();
    Vec<S> acc = Vec<S>::Zero(d);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = in.experts.data[t * k + j];
      const S w = S(in.weights.data[t * k + j]);
      Vec<S> hidden(H);
      auto in_row = [&](int64_t r) {  // row r of expert e's [2H, d]: gate rows, then up rows
        return Eigen::Map<const Eigen::VectorXf>(in.w_in.ptr() + (e * 2 * H + r) * d, d).cast<S>();
      };
      for (int64_t r = 0; r < H; ++r)
        hidden(r) = swiglu<S>(naive_dot<S>(in_row(r), y), naive_dot<S>(in_row(H + r), y));
      for (int64_t r = 0; r < d; ++r) {
        const Vec<S> row =
            Eigen::Map<const Eigen::VectorXf>(in.w_out.ptr() + (e * d + r) * H, H).cast<S>();
        acc(r) += w * naive_dot<S>(row, hidden);
      }
    }
    for (int64_t r = 0; r < d; ++r) f.data[t * d + r] = double(store<Act>(acc(r)));
  }
  return f;
}

Tensor<double> moe_experts_truth(const MoeExpertInputs& in) {
  return moe_experts<double, double>(in);
}

Tensor<double> moe_experts_baseline(const MoeExpertInputs& in) {
  return in.act == ActDType::f32 ? moe_experts<float, float>(in) : moe_experts<float, bf16>(in);
}

}  // namespace tandem::reference
