#pragma once
// MoE expert cases: seeded inputs and the comparison of the kernel with the reference (tolerance
// policy with the baseline drawn in three summation orders), shared by tests, fuzzing and
// benchmarks.
#include <cstdint>
#include <vector>

#include "cases/tensor_check.hpp"
#include "optimized/moe.hpp"

namespace tandem {

// T tokens of width d, each routed to k distinct experts of E (hidden width H) with weights in
// [0.1, 1]; y rounded to act. Every expert's weights are materialised when they fit
// kMoeMaterialisedValues, else only the routed ones (a release's 384 experts of 2 x 2304 x 5120
// are 36 GB): `experts` then index the materialised ones, in ascending order of their ids.
// Either way expert e's weights are the same values (Philox counters from e H d).
MoeExpertInputs make_moe_inputs(int64_t T, int64_t d, int64_t H, int64_t E, int64_t k, ActDType act,
                                uint64_t seed);

using MoeReference = KernelReference<MoeExpertOutputs>;  // [T, d]
MoeReference run_moe_reference(const MoeExpertInputs& in);
std::vector<TensorCheck> compare_moe(const MoeReference& ref, const MoeExpertOutputs& out,
                                     ActDType act);

}  // namespace tandem
