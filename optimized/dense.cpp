// The host entry of the dense kernels: validation (problem/dense.hpp), then the backend.
#include "optimized/dense.hpp"

#include "optimized/dispatch.hpp"

namespace tandem {

DenseOutputs run_dense_rows(const DenseInputs& in, const RunOptions& opt) {
  validate_block_threads(opt, 1024, "CUDA's limit per block");
  validate_dense_inputs(in);
  return TANDEM_DISPATCH(opt, run_dense_rows, in, opt);
}

}  // namespace tandem
