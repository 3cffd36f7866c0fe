#pragma once
// Reference of the selection (problem/indexer.hpp): sort each row's visible entries by score,
// descending, ties by index, ascending; keep the first k, pad with -1.
#include "core/tensor.hpp"
#include "problem/indexer.hpp"

namespace tandem::reference {

Tensor<int32_t> topk_select(const TopkInputs& in);

// The indexer's scores: row t's first visible_entries(start + t) entries (the rest NaN), summed
// in S (double = truth, float = the baseline). `order` picks the order heads and dims are summed
// in: 0 forwards, 1 backwards, k >= 2 another rotation (more draws of the baseline's error).
template <class S>
Tensor<S> index_logits(const IndexLogitsInputs& in, int order = 0);

}  // namespace tandem::reference
