#pragma once
// Reference of the MoE expert FFN (optimized/moe.hpp), written like the math:
// f[t] = sum_j w[t,j] * W_out[e] swiglu(W_gate[e] y[t], W_up[e] y[t]), e = experts[t,j], in
// selection order.
// Templated on the scalar S (double = truth, float = same-precision baseline, sums in naive
// order) and the storage dtype Act the output is rounded to (double: none).
#include <algorithm>
#include <cmath>

#include "core/tensor.hpp"
#include "problem/moe.hpp"

namespace tandem::reference {

// One hidden unit of the release's clamped SwiGLU: silu(min(gate, limit)) * clamp(up, +-limit).
template <class S>
S swiglu(S gate, S up) {
  const S limit = S(kSwigluLimit), g = std::min(gate, limit);
  return g / (S(1) + std::exp(-g)) * std::clamp(up, -limit, limit);
}

template <class S, class Act>
Tensor<double> moe_experts(const MoeExpertInputs& in);
Tensor<double> moe_experts_truth(const MoeExpertInputs& in);
Tensor<double> moe_experts_baseline(const MoeExpertInputs& in);

}  // namespace tandem::reference
