#pragma once
// Reference of causal attention over a KV cache (optimized/attention.hpp), written like the
// math: new token t at position P + t, per head o = softmax(q k_j / sqrt(hd), j <= P + t) v.
// Templated on the scalar S (double = truth; float = same-precision baseline, sums in naive
// order) and the storage dtype Act the output is rounded to (double: none).
#include "core/tensor.hpp"
#include "optimized/attention.hpp"

namespace tandem::reference {

template <class S, class Act>
Tensor<double> attention_causal(const AttentionInputs& in);
Tensor<double> attention_truth(const AttentionInputs& in);
Tensor<double> attention_baseline(const AttentionInputs& in);

}  // namespace tandem::reference
