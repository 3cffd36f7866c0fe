#pragma once
// Reference of sparse decode attention (problem/sparse_attn.hpp), written to read like the math:
// per token and head, gather the valid records, scores, softmax with the sink in the denominator,
// the weighted sum of the records, the output's RoPE dims turned back by the token's position.
// Templated on the scalar S (double = truth, float = baseline) and the output dtype Act.
#include "core/tensor.hpp"
#include "problem/sparse_attn.hpp"

namespace tandem::reference {

template <class S>
struct SparseAttnRun {
  Tensor<S> o;    // [T, heads, 512]
  Tensor<S> lse;  // [T, heads]
};

template <class S, class Act>
SparseAttnRun<S> sparse_attn(const SparseAttnInputs& in);

// The queries' RoPE (problem/sparse_attn.hpp RopeQueriesInputs) on q [T, heads, dims] in S.
template <class S, class Act>
Tensor<S> rope_queries(Tensor<S> q, int64_t start, double rope_theta);

}  // namespace tandem::reference
