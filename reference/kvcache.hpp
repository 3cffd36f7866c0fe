#pragma once
// Reference of the KV cache's write side (problem/kvcache.hpp, DESIGN 5.5), written to read like
// the math: one record at a time. Templated on the scalar S (double = truth, float = the
// same-precision baseline) and the storage dtype Act the pipeline rounds to (double: none,
// bf16: where the kernels round). Records are encoded here element by element, tile by tile.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.hpp"
#include "problem/kvcache.hpp"

namespace tandem::reference {

// ---- records
// Encodes `values` (one record's dims) into cache slot `slot` of `pool`.
void encode_record(const KvStoreOptions& o, std::span<const float> values, int64_t slot,
                   std::span<uint8_t> pool);
// One record of `values` as a row of record_bytes() (problem/kv_record.hpp copy_record_out's
// order), canonical_zero off.
std::vector<uint8_t> record_row(KvFormat f, std::span<const float> values);
// The values a record stands for (code x scale; the bf16 RoPE dims as stored).
std::vector<double> decode_record(KvFormat f, int64_t page_size, std::span<const uint8_t> pool,
                                  int64_t slot);
// A pool (every byte kKvPoison) with row i of `rows` encoded into slot slots[i].
Tensor<uint8_t> encode_pool(const KvStoreOptions& o, const Tensor<float>& rows,
                            std::span<const int64_t> slots);
Tensor<uint8_t> encode_pool(const KvQuantizeInputs& in);

// What a store run computes: the values each record holds (row r -> cache slot slots[r]), the
// compressors' pre-RoPE latents and their state after the run.
template <class S>
struct KvRun {
  Tensor<S> stored;  // [N, dims]
  Tensor<S> latent;  // [entries, D] (compressors)
  Tensor<S> pooled;  // [entries, D] (compressors): z before the pipeline, a convex mix of slots
  Tensor<S> state_a, state_b;
  std::vector<int64_t> slots;
};

// cos and sin of the 32 RoPE pairs' angles at one position: the truth in double, the baseline
// the fp32 table the kernels read (kv_rope_table's entries exactly). Made once per position and
// shared by every head and row there.
template <class S>
struct RopeAngles {
  std::array<S, kKvRopeDims / 2> cos, sin;
};
template <class S>
RopeAngles<S> rope_angles(int64_t pos, double theta);
// RoPE on the last 64 of z's `dims` values (adjacent pairs), each result stored in Act.
template <class S, class Act>
void rope_pairs(S* z, int dims, const RopeAngles<S>& a);
// Rows of `x` (bf16 values) through a record's pipeline (o.format's dims and norm): z = W x_r,
// then stored values at positions[r], one row each.
template <class S, class Act>
Tensor<S> project_records(const KvStoreOptions& o, const Tensor<float>& x, const Tensor<float>& w,
                          const Tensor<float>& norm_w, const std::vector<int64_t>& positions);

template <class S, class Act>
KvRun<S> kv_window_store(const KvWindowInputs& in);
// Prefill of T tokens, or one decode step (in.decode): the entry it completes, if any.
template <class S, class Act>
KvRun<S> kv_compress(const KvCompressInputs& in);
template <class S, class Act>
KvRun<S> index_key_store(const IndexKeyInputs& in);

}  // namespace tandem::reference
