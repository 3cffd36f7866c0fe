#pragma once
// Sparse decode attention cases (problem/sparse_attn.hpp): a filled window ring and a paged
// compressed cache of seeded records, each token's window index list (oldest first, -1 while
// the ring fills) and a top-k-like selection of visible entries (distinct, -1 padded), queries,
// and sinks (some -inf); the reference (truth, and the float baseline over seeded orders of each
// row's indices) and the comparison every caller shares.
#include <cstdint>
#include <vector>

#include "cases/tensor_check.hpp"
#include "optimized/sparse_attn.hpp"

namespace tandem {

struct SparseAttnShape {
  bool v41 = true;  // v41_window + v41_fp4, else model1 + model1
  int64_t tokens = 1;
  int heads = 8;
  int window = 128;
  int64_t n_comp = 300;  // compressed entries in the cache
  int top_k = 64;        // selected per token (fewer when fewer are visible: -1 padded)
  int ratio = 4;         // entry j is visible to position p when j < floor((p + 1) / r)
  int64_t start = 1200;  // the first token's position
  int64_t page_size = 64;
};

SparseAttnInputs make_sparse_attn_inputs(const SparseAttnShape& s, uint64_t seed);

struct SparseAttnReference {
  Tensor<double> o, o_baseline, lse, lse_baseline;
};
SparseAttnReference run_sparse_attn_reference(const SparseAttnInputs& in);
// The inputs with every row's indices in the id-th seeded order (the same sets).
SparseAttnInputs reordered(const SparseAttnInputs& in, uint32_t id);
std::vector<TensorCheck> compare_sparse_attn(const SparseAttnReference& ref,
                                             const SparseAttnOutputs& out);

}  // namespace tandem
