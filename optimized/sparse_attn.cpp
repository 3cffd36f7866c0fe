// The host entries of sparse decode attention and the queries' RoPE: validation
// (problem/sparse_attn.hpp), then the backend.
#include "optimized/sparse_attn.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

SparseAttnOutputs run_sparse_attn(const SparseAttnInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_sparse_attn_inputs(in);
  return TANDEM_DISPATCH(opt, run_sparse_attn, in, opt);
}

RopeQueriesOutputs run_rope_queries(const RopeQueriesInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_rope_queries_inputs(in);
  return TANDEM_DISPATCH(opt, run_rope_queries, in, opt);
}

}  // namespace tandem
