#pragma once
// Reference of the selection (problem/indexer.hpp): sort each row's visible entries by score,
// descending, ties by index, ascending; keep the first k, pad with -1. V4.1's candidate blocks
// likewise, by sorting blocks and listing the candidates' entries.
#include "core/tensor.hpp"
#include "problem/indexer.hpp"

namespace tandem::reference {

Tensor<int32_t> topk_select(const TopkInputs& in);
// Each row's blocks: the newest pinned, the others by their max score, descending (ties to the
// lower block), the first keep - 1 of them; all kept listed ascending, -1 padded.
Tensor<int32_t> candidate_blocks(const CandidateBlocksInputs& in);
// topk_select over the entries of each row's kept blocks only.
Tensor<int32_t> candidate_topk(const CandidateTopkInputs& in);

// The indexer's scores: row t's first visible_entries(start + t) entries (the rest NaN), summed
// in S (double = truth, float = the baseline). `order` picks the order heads and dims are summed
// in: 0 forwards, 1 backwards, k >= 2 another rotation (more draws of the baseline's error).
template <class S>
Tensor<S> index_logits(const IndexLogitsInputs& in, int order = 0);

}  // namespace tandem::reference
