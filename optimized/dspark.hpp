#pragma once
// DSpark verification by the kernel, as seen from the host (problem/dspark.hpp).
#include "optimized/backend.hpp"
#include "problem/dspark.hpp"

namespace tandem {

VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);

namespace emu_backend {
VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);
}
namespace cuda_backend {
VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);
}

}  // namespace tandem
