// The host entry of the selection kernels: validation (problem/indexer.hpp), then the backend.
#include "optimized/indexer.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

TopkOutputs run_topk_select(const TopkInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "the block scan's shared memory");
  validate_topk_inputs(in);
  return TANDEM_DISPATCH(opt, run_topk_select, in, opt);
}

}  // namespace tandem
