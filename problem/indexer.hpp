#pragma once
// The KV cache's selection (DESIGN 5.5, issue 14): top-k of the indexer's scores per query
// token among the entries it can see (j < lengths[t], floor((t + 1) / r) for a token at
// position t). Ties go to the lower index (relu makes exact-zero ties common; -0 == +0), a row
// with fewer than k visible entries pads with -1, and scores past a row's length are never read.
// Output order: score descending, then index ascending.
#include <cstdint>
#include <type_traits>

#include "core/dtype.hpp"
#include "core/hd.hpp"
#include "core/tensor.hpp"
#include "problem/kvcache.hpp"
#include "problem/traffic.hpp"

namespace tandem {

// The kernel sorts its selection in shared memory: the release's largest is 2048 (V4.1's
// candidate blocks; top-k 512 and 1024 elsewhere).
inline constexpr int kTopkMax = 2048;

struct TopkInputs {
  Tensor<float> scores;     // [T, N]: finite where visible; anything past a row's length
  Tensor<int32_t> lengths;  // [T]: the entries row t sees, in [0, N]
  int top_k = 512;
};

template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, TopkInputs>
void for_each_tensor(Input& in, F&& f) {
  f("scores", in.scores);
  f("lengths", in.lengths);
}

struct TopkOutputs {
  Tensor<int32_t> indices;  // [T, top_k]: selected entries, best first, -1 padded
  LaunchLog launches;
};

// Scores as the kernel orders them: a larger score gives a larger key; -0 and +0 are one score
// (a tie, as the reference compares them). Every key of a finite score is above 0x007fffff.
TANDEM_HD inline uint32_t topk_order_key(float score) {
  const uint32_t b = float_bits(score == 0.0f ? 0.0f : score);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The indexer's scores (DESIGN 5.5): I[t, j] = sum_h w[t, h] relu(q[t, h] . k_j) over the
// dequantized index keys and queries (MXFP4, or V3.2/Hopper's FP8; V4's queries are Hadamard-
// rotated before they are quantized, by their producer), for the entries token t sees: j <
// floor((start + t + 1) / ratio), at most n_keys. The keys live in pages: the sequence's key j is
// in pool page page_table[j / page_size], slot j % page_size.
struct IndexLogitsInputs {
  KvStoreOptions keys;         // the key pool's format (idx_mxfp4 or idx_fp8), page size, slots
  Tensor<uint8_t> key_pool;    // [pool bytes]
  Tensor<int32_t> page_table;  // [pages of this sequence] pool pages
  int64_t n_keys = 0;          // the sequence's keys 0..n_keys-1
  int ratio = 4;               // of the compressor the keys came from
  int64_t start = 0;           // position of the first query token
  int heads = 1;
  Tensor<uint8_t> q_records;  // [T * heads records of keys.format]: query (t, h) is record
                              // t * heads + h, records back to back
  Tensor<float> w;            // [T, heads] head weights
};

template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, IndexLogitsInputs>
void for_each_tensor(Input& in, F&& f) {
  f("key_pool", in.key_pool);
  f("page_table", in.page_table);
  f("q_records", in.q_records);
  f("w", in.w);
}

struct IndexLogitsOutputs {
  Tensor<float> scores;     // [T, n_keys]: row t's first lengths[t] entries (the rest unwritten)
  Tensor<int32_t> lengths;  // [T]: min(n_keys, floor((start + t + 1) / ratio))
  LaunchLog launches;
};

// The entries a query token at `pos` sees.
TANDEM_HD inline int64_t visible_entries(int64_t pos, int ratio, int64_t n_keys) {
  const int64_t v = (pos + 1) / ratio;
  return v < n_keys ? v : n_keys;
}

// The kernel stages a token's queries in shared memory: [heads, 128] floats.
inline constexpr int kIndexMaxHeads = 64;

void validate_index_logits_inputs(const IndexLogitsInputs& in);

// BadInput naming the tensor: scores [T >= 1, N >= 1], finite within each row's length;
// lengths [T] in [0, N]; top_k in [1, kTopkMax].
void validate_topk_inputs(const TopkInputs& in);

}  // namespace tandem
