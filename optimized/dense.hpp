#pragma once
// The optimized dense rows as seen from the host (problem/dense.hpp).
#include "optimized/backend.hpp"
#include "problem/dense.hpp"

namespace tandem {

DenseOutputs run_dense_rows(const DenseInputs& in, const RunOptions& opt);

namespace emu_backend {
DenseOutputs run_dense_rows(const DenseInputs& in, const RunOptions& opt);
}
namespace cuda_backend {
DenseOutputs run_dense_rows(const DenseInputs& in, const RunOptions& opt);
}

}  // namespace tandem
