// The host entry of the residual kernels: validation (problem/residual.hpp), then the backend.
#include "optimized/residual.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

ResidualBoundaryOutputs run_residual_boundary(const ResidualBoundaryInputs& in,
                                              const RunOptions& opt) {
  validate_residual_boundary(in);
  validate_block_threads(opt, 256, "residual kernels use ~200 registers per thread");
  return TANDEM_DISPATCH(opt, run_residual_boundary, in, opt);
}

RmsNormOutputs run_rms_norm_rows(const RmsNormInputs& in, const RunOptions& opt) {
  validate_rms_norm(in);
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  return TANDEM_DISPATCH(opt, run_rms_norm_rows, in, opt);
}

ResidualStackOutputs run_residual_stack(const ResidualStackInputs& in, ResidualPath path,
                                        const RunOptions& opt) {
  validate_residual_inputs(in);
  validate_block_threads(opt, 256, "residual kernels use ~200 registers per thread");
  return TANDEM_DISPATCH(opt, run_residual_stack, in, path, opt);
}

}  // namespace tandem
