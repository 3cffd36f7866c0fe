#pragma once
// The MoE expert FFN as data (the end-to-end model's FFN sublayer): each token's
// output is the gate-weighted sum of its selected experts, f[t] = sum_j w[t,j] *
// W_out[e] silu(W_in[e] y[t]) with e = experts[t,j], in selection order. The router itself is
// the vision component's moe_gate_biased_topk.
#include <cstdint>
#include <type_traits>

#include "core/tensor.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem {

struct MoeExpertInputs {
  ActDType act = ActDType::f32;
  Tensor<float> y;          // [T, d] the sublayer input (values of act)
  Tensor<int32_t> experts;  // [T, k] selected experts
  Tensor<float> weights;    // [T, k] their gate weights
  Tensor<float> w_in;       // [E, H, d]
  Tensor<float> w_out;      // [E, d, H]
};

// Every input tensor with its name (the golden blob's tensor names).
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, MoeExpertInputs>
void for_each_tensor(Input& in, F&& f) {
  f("y", in.y);
  f("experts", in.experts);
  f("weights", in.weights);
  f("w_in", in.w_in);
  f("w_out", in.w_out);
}

struct MoeExpertOutputs {
  Tensor<float> f;  // [T, d] (values of act)
  LaunchLog launches;
};

// BadInput naming the tensor: shapes the kernel supports, valid values.
void validate_moe_expert_inputs(const MoeExpertInputs& in);

}  // namespace tandem
