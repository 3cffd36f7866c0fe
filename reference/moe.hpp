#pragma once
// Reference of the MoE expert FFN (optimized/moe.hpp), written like the math:
// f[t] = sum_j w[t,j] * W_out[e] silu(W_in[e] y[t]), e = experts[t,j], in selection order.
// Templated on the scalar S (double = truth, float = same-precision baseline, sums in naive
// order) and the storage dtype Act the output is rounded to (double: none).
#include "core/tensor.hpp"
#include "problem/moe.hpp"

namespace tandem::reference {

template <class S, class Act>
Tensor<double> moe_experts(const MoeExpertInputs& in);
Tensor<double> moe_experts_truth(const MoeExpertInputs& in);
Tensor<double> moe_experts_baseline(const MoeExpertInputs& in);

}  // namespace tandem::reference
