#pragma once
// The MoE expert FFN as data (the end-to-end model's FFN sublayer): each token's
// output is the gate-weighted sum of its selected experts, f[t] = sum_j w[t,j] *
// W_out[e] swiglu(W_gate[e] y[t], W_up[e] y[t]) with e = experts[t,j], in selection order: the
// release's clamped SwiGLU experts (w1, w3, w2). The router itself is the vision component's
// moe_gate_biased_topk.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/tensor.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem {

// The release's clamped SwiGLU (swiglu_limit): silu(min(gate, 10)) * clamp(up, -10, 10).
inline constexpr float kSwigluLimit = 10.0f;

// A routing [T, k] (its gate weights [T, k]: float for the kernels, double in the references)
// with the shared expert `shared` appended to every row at weight 1: [T, k + 1] each (the
// release adds the shared expert's output unweighted).
template <class W>
void append_shared_expert(Tensor<int32_t>& experts, Tensor<W>& weights, int32_t shared) {
  const int64_t T = experts.dim(0), k = experts.dim(1);
  Tensor<int32_t> e({T, k + 1});
  Tensor<W> w({T, k + 1});
  for (int64_t t = 0; t < T; ++t) {
    std::copy_n(experts.ptr() + t * k, k, e.ptr() + t * (k + 1));
    std::copy_n(weights.ptr() + t * k, k, w.ptr() + t * (k + 1));
    e.data[size_t(t * (k + 1) + k)] = shared, w.data[size_t(t * (k + 1) + k)] = W(1);
  }
  experts = std::move(e), weights = std::move(w);
}

// The distinct experts of a routing [T, k], ascending: the rows of an expert table that holds
// only the routed experts (a release's 384 x 2 x 2304 x 5120 values are never held whole).
inline std::vector<int32_t> routed_experts(const Tensor<int32_t>& experts) {
  std::vector<int32_t> ids = experts.data;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}
// The routing renumbered into such a table: expert e -> its index in `routed`.
inline void renumber_routing(Tensor<int32_t>& experts, const std::vector<int32_t>& routed) {
  for (int32_t& e : experts.data)
    e = int32_t(std::lower_bound(routed.begin(), routed.end(), e) - routed.begin());
}

struct MoeExpertInputs {
  ActDType act = ActDType::f32;
  Tensor<float> y;          // [T, d] the sublayer input (values of act)
  Tensor<int32_t> experts;  // [T, k] selected experts
  Tensor<float> weights;    // [T, k] their gate weights
  Tensor<float> w_in;       // [E, 2H, d]: rows [0, H) the gate's (w1), [H, 2H) the up's (w3)
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
