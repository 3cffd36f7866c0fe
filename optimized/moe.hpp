#pragma once
// The optimized MoE expert FFN as seen from the host (problem/moe.hpp).
#include "optimized/backend.hpp"
#include "problem/moe.hpp"

namespace tandem {

MoeExpertOutputs run_moe_experts(const MoeExpertInputs& in, const RunOptions& opt);

namespace emu_backend {
MoeExpertOutputs run_moe_experts(const MoeExpertInputs& in, const RunOptions& opt);
}
namespace cuda_backend {
MoeExpertOutputs run_moe_experts(const MoeExpertInputs& in, const RunOptions& opt);
}

}  // namespace tandem
