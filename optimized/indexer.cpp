// The host entry of the selection kernels: validation (problem/indexer.hpp), then the backend.
#include "optimized/indexer.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

TopkOutputs run_topk_select(const TopkInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "the block scan's shared memory");
  validate_topk_inputs(in);
  return TANDEM_DISPATCH(opt, run_topk_select, in, opt);
}

CandidateBlocksOutputs run_candidate_blocks(const CandidateBlocksInputs& in,
                                            const RunOptions& opt) {
  validate_block_threads(opt, 1024, "the block scan's shared memory");
  validate_candidate_blocks_inputs(in);
  return TANDEM_DISPATCH(opt, run_candidate_blocks, in, opt);
}

TopkOutputs run_candidate_topk(const CandidateTopkInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "the block scan's shared memory");
  validate_candidate_topk_inputs(in);
  return TANDEM_DISPATCH(opt, run_candidate_topk, in, opt);
}

IndexLogitsOutputs run_index_logits(const IndexLogitsInputs& in, const RunOptions& opt) {
  // 64 heads of staged queries and a key row per warp fit 48 KiB of shared memory at 16 warps.
  validate_block_threads(opt, 512, "index_logits' shared memory");
  validate_index_logits_inputs(in);
  return TANDEM_DISPATCH(opt, run_index_logits, in, opt);
}

}  // namespace tandem
