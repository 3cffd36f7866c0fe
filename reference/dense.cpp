#include "reference/dense.hpp"

#include "reference/residual.hpp"  // naive_matvec, store

namespace tandem::reference {

template <class S, class Act>
Tensor<double> dense_rows(const DenseInputs& in) {
  const int64_t T = in.x.dim(0), n_in = in.x.dim(1), n_out = in.w.dim(0), G = in.groups;
  const int64_t group_in = n_in / G, group_out = n_out / G;
  const Mat<S> w =
      Eigen::Map<const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>>(in.w.ptr(), n_out, group_in)
          .cast<S>();
  Tensor<double> y({T, n_out});
  for (int64_t t = 0; t < T; ++t) {
    Vec<S> row(n_out);  // group g: its output rows times its slice of x[t]
    for (int64_t g = 0; g < G; ++g)
      row.segment(g * group_out, group_out) = naive_matvec<S>(
          w.middleRows(g * group_out, group_out),
          Eigen::Map<const Eigen::VectorXf>(in.x.ptr() + t * n_in + g * group_in, group_in)
              .cast<S>());
    for (int64_t r = 0; r < n_out; ++r) {
      S v = row(r);
      if (!in.bias.data.empty()) v += S(in.bias.data[r]);
      if (in.gelu) v = gelu(v);
      y.data[t * n_out + r] = double(store<Act>(v));
    }
  }
  return y;
}

Tensor<double> dense_rows_truth(const DenseInputs& in) { return dense_rows<double, double>(in); }

Tensor<double> dense_rows_baseline(const DenseInputs& in) {
  return in.act == ActDType::f32 ? dense_rows<float, float>(in) : dense_rows<float, bf16>(in);
}

}  // namespace tandem::reference
