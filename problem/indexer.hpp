#pragma once
// The KV cache's selection (DESIGN 5.5, issue 14): top-k of the indexer's scores per query
// token among the entries it can see (j < lengths[t], floor((t + 1) / r) for a token at
// position t). Ties go to the lower index (relu makes exact-zero ties common; -0 == +0), a row
// with fewer than k visible entries pads with -1, and scores past a row's length are never read.
// Output order: score descending, then index ascending.
#include <cmath>
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

// V4.1's candidate blocks (DESIGN 5.5): the candidate scorer (layer 20) cuts a row's visible
// entries into blocks of `block` positions, scores each block by its max, pins the block holding
// the newest visible entry and keeps `keep` blocks: the pinned one and the best others (max
// descending, ties to the lower block). The layers after it (24..36) select their own top-k only
// among the kept blocks' entries.
struct CandidateBlocksInputs {
  Tensor<float> scores;     // [T, N]: finite where visible
  Tensor<int32_t> lengths;  // [T]: visible entries of row t, in [0, N]
  int block = 8;
  int keep = 2048;
};

template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, CandidateBlocksInputs>
void for_each_tensor(Input& in, F&& f) {
  f("scores", in.scores);
  f("lengths", in.lengths);
}

struct CandidateBlocksOutputs {
  Tensor<int32_t> blocks;  // [T, keep]: min(keep, ceil(len / block)) block ids, ascending, -1 after
  LaunchLog launches;
};

struct CandidateTopkInputs {
  Tensor<float> scores;     // [T, N]: finite at the candidates' visible entries (nothing else read)
  Tensor<int32_t> lengths;  // [T]
  Tensor<int32_t> blocks;   // [T, C]: per row distinct ascending ids < ceil(len / block), then -1
  int block = 8;
  int top_k = 512;
};

template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, CandidateTopkInputs>
void for_each_tensor(Input& in, F&& f) {
  f("scores", in.scores);
  f("lengths", in.lengths);
  f("blocks", in.blocks);
}

// The entries of row t's candidates, in index order: entry p of the row's list is block
// blocks[t, p / block], offset p % block. Only the highest block can be partial (the newest).
TANDEM_HD inline int64_t candidate_entries(const int32_t* blocks, int count, int block,
                                           int64_t length) {
  if (count == 0) return 0;
  const int64_t last = length - int64_t(blocks[count - 1]) * block;
  return int64_t(count - 1) * block + (last < block ? last : block);
}

// The indexer's scores (DESIGN 5.5): I[t, j] = sum_h s w[t, h] relu(q[t, h] . k_j) (s:
// weight_scale) over the dequantized index keys and queries (MXFP4, or V3.2/Hopper's FP8; V4's
// queries are Hadamard-rotated before they are quantized, by their producer), for the entries
// token t sees: j < floor((start + t + 1) / ratio), at most n_keys. The keys live in pages: the
// sequence's key j is in pool page page_table[j / page_size], slot j % page_size.
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
  // Every head weight times this: the release's index_head_dim^-0.5 x heads^-0.5 on
  // weights_proj's output (release_index_weight_scale); 1: w is used as given.
  float weight_scale = 1.0f;
};

// The release's indexer weights scale for `heads` heads of 128 dims (V4 and V4.1's
// Indexer: weights_proj(x) * (softmax_scale * n_heads^-0.5)).
inline float release_index_weight_scale(int heads) {
  return static_cast<float>(1.0 / std::sqrt(128.0 * heads));
}

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
// As topk's, but the newest block's scores need not be finite (never read); block in
// [1, 1024], keep in [1, kTopkMax].
void validate_candidate_blocks_inputs(const CandidateBlocksInputs& in);
// scores and lengths as topk's, but finite only where a candidate's entry is visible; blocks
// [T, C in [1, kTopkMax]], each row's ids distinct, ascending and below ceil(len / block), then
// only -1; block in [1, 1024]; top_k in [1, kTopkMax].
void validate_candidate_topk_inputs(const CandidateTopkInputs& in);
// Row t's kept blocks (those before the first -1).
int candidate_count(const CandidateTopkInputs& in, int64_t t);

}  // namespace tandem
