// The host entry of the vision kernels: validation (problem/vision.hpp), then the backend.
#include "optimized/vision.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt) {
  validate_unshuffle_grid(grid);
  return TANDEM_DISPATCH(opt, run_unshuffle, grid, act, opt);
}

RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt) {
  validate_rope_inputs(in);
  return TANDEM_DISPATCH(opt, run_rope_2d, in, act, opt);
}

MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt) {
  validate_moe_gate_inputs(in);
  return TANDEM_DISPATCH(opt, run_moe_gate, in, opt);
}

}  // namespace tandem
