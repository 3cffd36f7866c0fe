#pragma once
// DSpark verification by the kernel, as seen from the host (problem/dspark.hpp).
#include "optimized/backend.hpp"
#include "problem/dspark.hpp"

namespace tandem {

VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);
// The drafter's Markov step (problem/dspark.hpp MarkovDraftInputs): one launch.
MarkovDraftOutputs run_markov_draft(const MarkovDraftInputs& in, const RunOptions& opt);

namespace emu_backend {
VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);
MarkovDraftOutputs run_markov_draft(const MarkovDraftInputs& in, const RunOptions& opt);
}  // namespace emu_backend
namespace cuda_backend {
VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt);
MarkovDraftOutputs run_markov_draft(const MarkovDraftInputs& in, const RunOptions& opt);
}  // namespace cuda_backend

}  // namespace tandem
