#pragma once
// Attention cases: seeded queries and KV caches, and the comparison of the kernel with the
// reference (tolerance policy, baseline in three summation orders), shared by tests, fuzzing,
// `tandem verify` and benchmarks.
#include <cstdint>
#include <vector>

#include "cases/tensor_check.hpp"
#include "optimized/attention.hpp"

namespace tandem {

// T new tokens after P cached positions, width d in `heads` heads; values rounded to act.
AttentionInputs make_attention_inputs(int64_t T, int64_t P, int64_t d, int heads, ActDType act,
                                      uint64_t seed);

using AttentionReference = KernelReference<AttentionOutputs>;  // [T, d]
AttentionReference run_attention_reference(const AttentionInputs& in);
std::vector<TensorCheck> compare_attention(const AttentionReference& ref,
                                           const AttentionOutputs& out, ActDType act);

}  // namespace tandem
