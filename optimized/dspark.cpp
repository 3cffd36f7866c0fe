// The host entry of the dspark kernels: validation (problem/dspark.hpp), then the backend.
#include "optimized/dspark.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

VerifyOutputs run_dspark_verify(const VerifyInputs& in, const RunOptions& opt) {
  validate_verify_inputs(in);
  return TANDEM_DISPATCH(opt, run_dspark_verify, in, opt);
}

MarkovDraftOutputs run_markov_draft(const MarkovDraftInputs& in, const RunOptions& opt) {
  validate_markov_draft_inputs(in);
  return TANDEM_DISPATCH(opt, run_markov_draft, in, opt);
}

}  // namespace tandem
