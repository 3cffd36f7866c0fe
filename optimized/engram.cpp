// The host entry of the engram kernels: validation (problem/engram.hpp), then the backend.
#include "optimized/engram.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

EngramOutputs run_engram_layer(const EngramInputs& in, const RunOptions& opt) {
  validate_engram_inputs(in);
  validate_block_threads(opt, 1024, "CUDA's limit per block");  // engram_gate's warps
  return TANDEM_DISPATCH(opt, run_engram_layer, in, opt);
}

}  // namespace tandem
