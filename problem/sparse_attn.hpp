#pragma once
// Sparse decode attention over the compressed cache (DESIGN 5.5, issue 14 item 3): for token t
// and head h, over the set S of its valid window slots and selected compressed entries (one
// 512-dim record is both K and V),
//   s_i = q_h . k_i / sqrt(512)   o_h = sum_S e^{s_i} v_i / (sum_S e^{s_i} + e^{sink_h})
// (the sink is not scaled; -inf is no sink), then the output's last 64 (RoPE) dims turned back by
// the token's position, and lse_h = log sum_S e^{s_i} (the sink not included; +inf when S is
// empty, FlashMLA's convention, and o = 0 then). Index -1 is skipped; any other index outside
// its cache is bad input. The result does not depend on the order of the indices.
#include <cstdint>
#include <type_traits>

#include "core/tensor.hpp"
#include "problem/kvcache.hpp"
#include "problem/traffic.hpp"

namespace tandem {

// The kernel stages a group of heads' queries and each warp's record: heads are processed four
// at a time.
inline constexpr int kSparseAttnHeadGroup = 4;
inline constexpr int kSparseAttnMaxHeads = 128;

struct SparseAttnInputs {
  int heads = 1;
  int64_t start = 0;  // position of q's first token
  double rope_theta = 10000;
  Tensor<float> q;      // [T, heads, 512] bf16 values (RoPE'd)
  Tensor<float> sinks;  // [heads]: finite or -inf
  // The window ring: `window_pool` of window.pool_slots records; window_idx [T, W] ring slots.
  KvStoreOptions window;
  Tensor<uint8_t> window_pool;
  Tensor<int32_t> window_idx;
  // The compressed cache in pages: entry j at pool page page_table[j / page_size]; comp_idx
  // [T, K] entries in [0, n_comp).
  KvStoreOptions comp;
  Tensor<uint8_t> comp_pool;
  Tensor<int32_t> page_table;
  int64_t n_comp = 0;
  Tensor<int32_t> comp_idx;
};

template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, SparseAttnInputs>
void for_each_tensor(Input& in, F&& f) {
  f("q", in.q);
  f("sinks", in.sinks);
  f("window_pool", in.window_pool);
  f("window_idx", in.window_idx);
  f("comp_pool", in.comp_pool);
  f("page_table", in.page_table);
  f("comp_idx", in.comp_idx);
}

struct SparseAttnOutputs {
  Tensor<float> o;    // [T, heads, 512] bf16 values
  Tensor<float> lse;  // [T, heads]
  LaunchLog launches;
};

// The queries' RoPE before sparse attention and the indexer (DESIGN 5.5): q [T, heads, dims]
// (dims 128: index queries, 512: attention queries) -> bf16(q), then the last 64 dims of each
// head turned by the token's position start + t (adjacent pairs, as the records'), each bf16.
inline constexpr int kRopeQueryMaxHeads = 1024;
struct RopeQueriesInputs {
  int64_t start = 0;
  double rope_theta = 10000;
  Tensor<float> q;  // [T, heads, dims]
};

template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, RopeQueriesInputs>
void for_each_tensor(Input& in, F&& f) { f("q", in.q); }

struct RopeQueriesOutputs {
  Tensor<float> q;  // [T, heads, dims] bf16 values
  LaunchLog launches;
};

void validate_rope_queries_inputs(const RopeQueriesInputs& in);

// The record formats the kernel reads as (window, compressed): V4 (model1, model1), V4.1
// (v41_window, v41_fp4).
bool sparse_attn_formats_supported(KvFormat window, KvFormat comp);

void validate_sparse_attn_inputs(const SparseAttnInputs& in);

}  // namespace tandem
