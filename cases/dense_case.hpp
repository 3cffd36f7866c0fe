#pragma once
// dense_rows cases: seeded inputs and the comparison of the kernel with the reference (tolerance
// policy, baseline in three summation orders), shared by tests, fuzzing and benchmarks.
#include <cstdint>
#include <vector>

#include "cases/case.hpp"
#include "cases/tensor_check.hpp"
#include "optimized/dense.hpp"

namespace tandem {

// T tokens of n_in inputs in [-2, 2] (rounded to act), weights [n_out, n_in / groups] in
// +-1/sqrt(n_in / groups). With `bias`: a bias in [-1, 1]; `gelu`: exact GELU after it.
DenseInputs make_dense_inputs(int64_t T, int64_t n_in, int64_t n_out, ActDType act, uint64_t seed,
                              bool bias = false, bool gelu = false, int groups = 1);

// The router's logits on a layer of released weights: tokens seeded activations of the release's
// width (f32) into the layer's ffn.gate.weight [experts, d].
DenseInputs router_logits_inputs(const CheckpointLayer& l);

using DenseReference = KernelReference<DenseOutputs>;  // [T, n_out]
DenseReference run_dense_reference(const DenseInputs& in);
std::vector<TensorCheck> compare_dense(const DenseReference& ref, const DenseOutputs& out,
                                       ActDType act);

}  // namespace tandem
