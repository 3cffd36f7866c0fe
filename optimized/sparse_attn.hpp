#pragma once
// Sparse decode attention as seen from the host (problem/sparse_attn.hpp).
#include "optimized/backend.hpp"
#include "problem/sparse_attn.hpp"

namespace tandem {

SparseAttnOutputs run_sparse_attn(const SparseAttnInputs& in, const RunOptions& opt);

namespace emu_backend {
SparseAttnOutputs run_sparse_attn(const SparseAttnInputs& in, const RunOptions& opt);
}
namespace cuda_backend {
SparseAttnOutputs run_sparse_attn(const SparseAttnInputs& in, const RunOptions& opt);
}

}  // namespace tandem
