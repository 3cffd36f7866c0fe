#pragma once
// Byte model of sparse_decode_attn (optimized/sparse_attn.cuh); must equal the emulator's counts.
#include <cstdint>

#include "problem/sparse_attn.hpp"
#include "problem/traffic.hpp"

namespace tandem::sim {

// Per token and group of four heads: the group's queries, sinks and the token's RoPE row (32
// pairs per head), every index (and a page-table entry per valid compressed one), every valid
// record, the group's outputs (bf16) and lse.
LaunchCounts predict_sparse_attn(const SparseAttnInputs& in);
// rope_queries on [T, heads, dims]: each row's f32 values and its token's 64 cos/sin entries
// read, its bf16 values written.
LaunchCounts predict_rope_queries(int64_t T, int64_t heads, int64_t dims);

}  // namespace tandem::sim
