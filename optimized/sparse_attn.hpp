#pragma once
// Sparse decode attention as seen from the host (problem/sparse_attn.hpp).
#include "optimized/backend.hpp"
#include "problem/sparse_attn.hpp"

namespace tandem {

#define TANDEM_SPARSE_ATTN_ENTRIES(X)                                                     \
  X(SparseAttnOutputs run_sparse_attn(const SparseAttnInputs& in, const RunOptions& opt)) \
  X(RopeQueriesOutputs run_rope_queries(const RopeQueriesInputs& in, const RunOptions& opt))
#define TANDEM_SPARSE_ATTN_DECLARE(decl) decl;

TANDEM_SPARSE_ATTN_ENTRIES(TANDEM_SPARSE_ATTN_DECLARE)
namespace emu_backend {
TANDEM_SPARSE_ATTN_ENTRIES(TANDEM_SPARSE_ATTN_DECLARE)
}
namespace cuda_backend {
TANDEM_SPARSE_ATTN_ENTRIES(TANDEM_SPARSE_ATTN_DECLARE)
}

}  // namespace tandem
