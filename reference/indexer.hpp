#pragma once
// Reference of the selection (problem/indexer.hpp): sort each row's visible entries by score,
// descending, ties by index, ascending; keep the first k, pad with -1.
#include "core/tensor.hpp"
#include "problem/indexer.hpp"

namespace tandem::reference {

Tensor<int32_t> topk_select(const TopkInputs& in);

}  // namespace tandem::reference
