#pragma once
// Seeded weights for the reference's small models: uniform in [-scale, scale), Philox keyed by
// (seed, id, index) so every run and platform builds the same model.
#include <Eigen/Dense>

#include <cstdint>

#include "core/philox.hpp"

namespace tandem::reference {

inline Eigen::MatrixXd seeded_matrix(int64_t rows, int64_t cols, uint64_t seed, uint32_t id,
                                     double scale) {
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    m.data()[i] = scale * (2.0 * philox_uniform(philox_draw(seed, id, uint32_t(i)).v[0]) - 1.0);
  return m;
}

// Row-wise RMS norm (no gain): x / sqrt(mean(x^2) + eps).
inline Eigen::MatrixXd rms_norm_rows(const Eigen::MatrixXd& x, double eps = 1e-6) {
  Eigen::MatrixXd y = x;
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    y.row(i) /= std::sqrt(x.row(i).squaredNorm() / double(x.cols()) + eps);
  return y;
}

// Softmax of a row of logits at a temperature, in double.
inline Eigen::RowVectorXd softmax(const Eigen::RowVectorXd& logits, double temperature) {
  const Eigen::RowVectorXd e = ((logits.array() - logits.maxCoeff()) / temperature).exp();
  return e / e.sum();
}

}  // namespace tandem::reference
