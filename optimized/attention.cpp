// The host entry of the attention kernels: validation (problem/attention.hpp), then the backend.
#include "optimized/attention.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

AttentionOutputs run_attention_causal(const AttentionInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_attention_inputs(in);
  return TANDEM_DISPATCH(opt, run_attention_causal, in, opt);
}

}  // namespace tandem
