// The host entry of the moe kernels: validation (problem/moe.hpp), then the backend.
#include "optimized/moe.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

MoeExpertOutputs run_moe_experts(const MoeExpertInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_moe_expert_inputs(in);
  return TANDEM_DISPATCH(opt, run_moe_experts, in, opt);
}

}  // namespace tandem
