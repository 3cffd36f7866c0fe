#pragma once
// The comparison library (DESIGN section 4).
//  * discrete outputs: bit-exact (compare_exact);
//  * floating outputs: err(opt, truth) <= 2 * err(baseline, truth) + 2 * ulp_out(|truth|) per
//    element (with row scales, below), and NMSE(opt) <= 4 * NMSE(baseline) + the same 2-ulp
//    term (squared) globally (the factor 2 on errors, squared), where truth is the double reference
//    and baseline the naive same-precision reference;
//  * NaN and +-Inf positions and signs must match truth exactly.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace tandem {

enum class OutDType { F64, F32, BF16 };

// Spacing of the output dtype's representable numbers at |x| (the "ulp_out" of DESIGN 4).
double ulp_out(OutDType d, double x);

struct CompareResult {
  bool pass = true;
  int64_t n = 0;
  // The element with the largest err/budget ratio (or the first special-value mismatch).
  int64_t worst_index = -1;
  double worst_truth = 0, worst_baseline = 0, worst_optimized = 0;
  double worst_err = 0, worst_budget = 0, worst_ratio = 0;  // ratio <= 1 passes
  double pass_fraction = 1;
  double nmse_optimized = 0, nmse_baseline = 0, nmse_budget = 0;
  std::string failure;  // empty when pass

  double margin() const { return 1.0 - worst_ratio; }  // share of the budget left
  std::string summary() const;
};

// `row`: consecutive elements that share error scales. Errors that enter through per-row scalars
// (a norm, mixing coefficients, a reduction) are correlated along a row and sized by the row's
// operands, so (1) the baseline error is the largest in the row: one element's is a single noisy
// draw of that scale; (2) ulp_out is taken at max(|truth|, RMS of the row's truth): an element
// made small by cancellation keeps the absolute error of its operands. row = 1: element-wise.
CompareResult compare_to_truth(std::span<const double> truth, std::span<const double> baseline,
                               std::span<const double> optimized, OutDType out, int64_t row = 1);

// Bit-for-bit equality of two sequences of trivially copyable elements.
struct ExactResult {
  bool pass = true;
  int64_t n = 0, mismatches = 0, first_mismatch = -1;
  std::string summary() const;
};

template <class T>
ExactResult compare_exact(std::span<const T> expected, std::span<const T> actual) {
  ExactResult r;
  r.n = static_cast<int64_t>(expected.size());
  if (expected.size() != actual.size()) {
    r.pass = false;
    r.mismatches = std::max<int64_t>(r.n, static_cast<int64_t>(actual.size()));
    r.first_mismatch = static_cast<int64_t>(std::min(expected.size(), actual.size()));
    return r;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(&expected[i], &actual[i], sizeof(T)) != 0) {
      if (r.first_mismatch < 0) r.first_mismatch = static_cast<int64_t>(i);
      ++r.mismatches;
    }
  }
  r.pass = r.mismatches == 0;
  return r;
}

// Fills a buffer with all-ones bytes: NaN in f64, f32, bf16 and e4m3, so an element a kernel
// forgets to write fails the comparison (the same pattern cudaMemset(0xff) gives on a GPU).
template <class T>
void poison(std::span<T> out) {
  std::memset(static_cast<void*>(out.data()), 0xff, out.size_bytes());
}

}  // namespace tandem
