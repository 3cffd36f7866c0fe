#include "cases/dense_case.hpp"

#include <cmath>

#include "cases/case_util.hpp"
#include "reference/dense.hpp"
#include "reference/residual.hpp"  // store

namespace tandem {

DenseInputs make_dense_inputs(int64_t T, int64_t n_in, int64_t n_out, ActDType act, uint64_t seed) {
  DenseInputs in;
  in.act = act;
  in.x = seeded_tensor({T, n_in}, seed, 1, -2.0f, 2.0f);
  for (float& v : in.x.data) v = act == ActDType::bf16 ? reference::store<bf16>(v) : v;
  const float a = 1.0f / std::sqrt(float(n_in));
  in.w = seeded_tensor({n_out, n_in}, seed, 2, -a, a);
  return in;
}

namespace {

// The float baseline with the inputs permuted by p (the sums in another order): another draw of
// the same-precision error.
Tensor<double> permuted_baseline(const DenseInputs& in, const std::vector<int64_t>& p) {
  const int64_t T = in.x.dim(0), n_in = in.x.dim(1), n_out = in.w.dim(0);
  DenseInputs q = in;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n_in; ++i) q.x.data[t * n_in + i] = in.x.data[t * n_in + p[i]];
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t i = 0; i < n_in; ++i) q.w.data[r * n_in + i] = in.w.data[r * n_in + p[i]];
  return reference::dense_rows_baseline(q);
}

}  // namespace

DenseReference run_dense_reference(const DenseInputs& in) {
  DenseReference r{reference::dense_rows_truth(in), reference::dense_rows_baseline(in)};
  for (const auto& p : baseline_orders(in.x.dim(1), in.w.dim(0)))
    keep_farthest(r.baseline, permuted_baseline(in, p), r.truth);
  return r;
}

std::vector<TensorCheck> compare_dense(const DenseReference& ref, const DenseOutputs& out,
                                       ActDType act) {
  const OutDType dt = act == ActDType::f32 ? OutDType::F32 : OutDType::BF16;
  return {{"y", compare_to_truth(ref.truth.span(), ref.baseline.span(), as_doubles(out.y), dt,
                                 ref.truth.dim(1))}};
}

}  // namespace tandem
