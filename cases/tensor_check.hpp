#pragma once
// One compared tensor: its name and the comparison result (tolerance policy or bit-exact).
#include <cmath>
#include <string>
#include <vector>

#include "core/compare.hpp"
#include "core/tensor.hpp"
#include "problem/dtype.hpp"

namespace tandem {

struct TensorCheck {
  std::string name;
  CompareResult result;
};

// A discrete output (DESIGN 4): bit-exact, reported as a CompareResult with the first mismatch.
template <class T>
TensorCheck exact_check(std::string name, const Tensor<T>& want, const Tensor<T>& got) {
  const ExactResult e = compare_exact<T>(want.span(), got.span());
  CompareResult r;
  r.pass = e.pass && want.shape == got.shape;
  r.n = e.n;
  r.worst_index = e.first_mismatch;
  r.worst_ratio = r.pass ? 0 : INFINITY;
  r.pass_fraction = e.n ? 1.0 - double(e.mismatches) / e.n : 1.0;
  if (e.first_mismatch >= 0 && e.first_mismatch < want.size() && e.first_mismatch < got.size()) {
    r.worst_truth = r.worst_baseline = static_cast<double>(want.data[e.first_mismatch]);
    r.worst_optimized = static_cast<double>(got.data[e.first_mismatch]);
  }
  if (!r.pass) r.failure = want.shape == got.shape ? e.summary() : "shape mismatch";
  return {std::move(name), r};
}

// A floating output against its truth under the tolerance policy (DESIGN 4), its shape checked
// first: a wrong shape fails. `row`: elements that share error scales (compare_to_truth).
inline TensorCheck tolerance_check(std::string name, const Tensor<double>& truth,
                                   const Tensor<double>& baseline, const Tensor<float>& got,
                                   OutDType out, int64_t row) {
  if (got.shape != truth.shape || baseline.shape != truth.shape) {
    CompareResult r;
    r.pass = false;
    r.failure = "shape mismatch: " + std::to_string(got.size()) + " elements, the truth has " +
                std::to_string(truth.size());
    return {std::move(name), r};
  }
  const std::vector<double> optimized(got.data.begin(), got.data.end());
  return {std::move(name),
          compare_to_truth(truth.span(), baseline.span(), optimized, out, row < 1 ? 1 : row)};
}

// The reference side of a kernel with one floating output (dense, attention, MoE experts): the
// truth in double and the float baseline (its farthest error draws), [rows, row] each. Outputs is
// the kernel's outputs type, so each kernel's reference is a type of its own.
template <class Outputs>
struct KernelReference {
  Tensor<double> truth, baseline;
};

// That output (stored as act) against the reference under the tolerance policy (DESIGN 4), a row
// of the truth per comparison row.
template <class Outputs>
std::vector<TensorCheck> compare_output(std::string name, const KernelReference<Outputs>& ref,
                                        const Tensor<float>& out, ActDType act) {
  const std::vector<double> optimized(out.data.begin(), out.data.end());
  return {{std::move(name), compare_to_truth(ref.truth.span(), ref.baseline.span(), optimized,
                                             out_dtype(act), ref.truth.dim(1))}};
}

}  // namespace tandem
