#pragma once
// The optimized vision kernels as seen from the host (problem/vision.hpp).
#include "optimized/backend.hpp"
#include "problem/vision.hpp"

namespace tandem {

UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt);
RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt);
MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt);

namespace emu_backend {
UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt);
RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt);
MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt);
}  // namespace emu_backend
namespace cuda_backend {
UnshuffleOutputs run_unshuffle(const Tensor<float>& grid, ActDType act, const RunOptions& opt);
RopeOutputs run_rope_2d(const RopeInputs& in, ActDType act, const RunOptions& opt);
MoeGateOutputs run_moe_gate(const MoeGateInputs& in, const RunOptions& opt);
}  // namespace cuda_backend

}  // namespace tandem
