#pragma once
// The optimized residual stack (V4 unfused / V4.1 single pass) as seen from the host.
#include "optimized/backend.hpp"
#include "problem/residual.hpp"

namespace tandem {

ResidualStackOutputs run_residual_stack(const ResidualStackInputs& in, ResidualPath path,
                                        const RunOptions& opt);

ResidualBoundaryOutputs run_residual_boundary(const ResidualBoundaryInputs& in,
                                              const RunOptions& opt);
RmsNormOutputs run_rms_norm_rows(const RmsNormInputs& in, const RunOptions& opt);

namespace emu_backend {
ResidualStackOutputs run_residual_stack(const ResidualStackInputs& in, ResidualPath path,
                                        const RunOptions& opt);
ResidualBoundaryOutputs run_residual_boundary(const ResidualBoundaryInputs& in,
                                              const RunOptions& opt);
RmsNormOutputs run_rms_norm_rows(const RmsNormInputs& in, const RunOptions& opt);
}  // namespace emu_backend
namespace cuda_backend {
ResidualStackOutputs run_residual_stack(const ResidualStackInputs& in, ResidualPath path,
                                        const RunOptions& opt);
ResidualBoundaryOutputs run_residual_boundary(const ResidualBoundaryInputs& in,
                                              const RunOptions& opt);
RmsNormOutputs run_rms_norm_rows(const RmsNormInputs& in, const RunOptions& opt);
}  // namespace cuda_backend

}  // namespace tandem
