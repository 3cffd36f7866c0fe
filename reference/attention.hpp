#pragma once
// Reference of causal attention over a KV cache (optimized/attention.hpp), written like the
// math: new token t at position P + t, per head o = softmax(q k_j / sqrt(hd), j <= P + t) v.
// Templated on the scalar S (double = truth; float = same-precision baseline, sums in naive
// order) and the storage dtype Act the output is rounded to (double: none).
#include "core/tensor.hpp"
#include "problem/attention.hpp"

namespace tandem::reference {

// The orders the baseline's sums run in: over positions (visibility stays causal) and within
// a head's dot products (left to right, or a pairwise tree as a warp's butterfly sums). The
// baseline's error is drawn in several orders, as the kernel sums in its own.
enum class PositionOrder { given, reversed, rotated };
enum class DotOrder { sequential, pairwise };

template <class S, class Act>
Tensor<double> attention_causal(const AttentionInputs& in, PositionOrder order, DotOrder dot);
Tensor<double> attention_truth(const AttentionInputs& in);
Tensor<double> attention_baseline(const AttentionInputs& in,
                                  PositionOrder order = PositionOrder::given,
                                  DotOrder dot = DotOrder::sequential);

}  // namespace tandem::reference
