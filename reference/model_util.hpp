#pragma once
// What the reference's small models share (the DSpark backbone and drafter, the end-to-end
// model): seeded weights, softmax, causal attention over a KV cache (the small backbone's).
#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/philox.hpp"

namespace tandem::reference {

// Uniform in [-scale, scale), Philox keyed by (seed, id, index): every run and platform builds
// the same model.
inline Eigen::MatrixXd seeded_matrix(int64_t rows, int64_t cols, uint64_t seed, uint32_t id,
                                     double scale) {
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    m.data()[i] = scale * (2.0 * philox_uniform(philox_draw(seed, id, uint32_t(i)).v[0]) - 1.0);
  return m;
}

// Bit-identical, shapes included (Eigen's == assumes equal shapes and reads past the smaller).
inline bool identical(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && a == b;
}

// Softmax of a row of logits at a temperature, in double.
inline Eigen::RowVectorXd softmax(const Eigen::RowVectorXd& logits, double temperature) {
  const Eigen::RowVectorXd e = ((logits.array() - logits.maxCoeff()) / temperature).exp();
  return e / e.sum();
}

// One query's causal attention over the cached keys and values (every position up to and
// including its own), `heads` heads of width q.size() / heads side by side, in q's scalar.
template <class Vector>
Vector attend(const Vector& q, const std::vector<Vector>& keys, const std::vector<Vector>& values,
              int64_t heads) {
  using S = typename Vector::Scalar;
  const int64_t hd = q.size() / heads;
  Vector out = Vector::Zero(q.size());
  for (int64_t h = 0; h < heads; ++h) {
    Eigen::Matrix<S, Eigen::Dynamic, 1> scores(keys.size());
    for (size_t j = 0; j < keys.size(); ++j)
      scores(j) = q.segment(h * hd, hd).dot(keys[j].segment(h * hd, hd)) / std::sqrt(S(hd));
    const Eigen::Matrix<S, Eigen::Dynamic, 1> p = (scores.array() - scores.maxCoeff()).exp();
    for (size_t j = 0; j < keys.size(); ++j)
      out.segment(h * hd, hd) += p(j) / p.sum() * values[j].segment(h * hd, hd);
  }
  return out;
}

}  // namespace tandem::reference
