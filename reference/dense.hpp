#pragma once
// Reference of dense_rows (optimized/dense.hpp): y[t] = W x[t] (+ b, GELU). Templated on the scalar
// S (double = truth, float = same-precision baseline, sums in naive order) and the storage dtype
// Act the output is rounded to (double: none).
#include "core/tensor.hpp"
#include "problem/dense.hpp"

namespace tandem::reference {

template <class S, class Act>
Tensor<double> dense_rows(const DenseInputs& in);
Tensor<double> dense_rows_truth(const DenseInputs& in);
Tensor<double> dense_rows_baseline(const DenseInputs& in);

}  // namespace tandem::reference
