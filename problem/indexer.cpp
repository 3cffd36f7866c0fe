#include "problem/indexer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {

namespace {

// scores [T, N] and lengths [T] in [0, N].
void validate_row_shapes(const char* what, const Tensor<float>& scores,
                         const Tensor<int32_t>& lengths) {
  if (scores.shape.size() != 2 || scores.dim(0) < 1 || scores.dim(1) < 1 ||
      scores.dim(0) > (int64_t{1} << 24) || scores.dim(1) > (int64_t{1} << 30))
    throw_bad_input("{} input 'scores': expected [T in [1, 2^24], N in [1, 2^30]]", what);
  const int64_t T = scores.dim(0), N = scores.dim(1);
  if (lengths.shape != Shape{T})
    throw_bad_input("{} input 'lengths': expected [{}] (one per row of scores)", what, T);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t len = lengths.data[size_t(t)];
    if (len < 0 || len > N)
      throw_bad_input("{} input 'lengths'[{}] = {}: outside [0, {}]", what, t, len, N);
  }
}

// The scores the kernel reads (`read(t, j)` says whether it reads entry j of row t, within the
// row's length) are finite. After validate_row_shapes.
template <class Read>
void validate_read_scores(const char* what, const Tensor<float>& scores,
                          const Tensor<int32_t>& lengths, Read read) {
  const int64_t T = scores.dim(0), N = scores.dim(1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < lengths.data[size_t(t)]; ++j) {
      const float s = scores.data[size_t(t * N + j)];
      if (!std::isfinite(s) && read(t, j))
        throw_bad_input("{} input 'scores'[{}, {}] is {} (within the row's length)", what, t, j, s);
    }
}

template <class Read>
void validate_rows(const char* what, const Tensor<float>& scores, const Tensor<int32_t>& lengths,
                   Read read) {
  validate_row_shapes(what, scores, lengths);
  validate_read_scores(what, scores, lengths, read);
}

void validate_count(const char* what, const char* field, int v, int hi) {
  if (v < 1 || v > hi) throw_bad_input("{}: {} {} outside [1, {}]", what, field, v, hi);
}

}  // namespace

void validate_topk_inputs(const TopkInputs& in) {
  validate_count("topk", "top_k", in.top_k, kTopkMax);
  validate_rows("topk", in.scores, in.lengths, [](int64_t, int64_t) { return true; });
}

void validate_candidate_blocks_inputs(const CandidateBlocksInputs& in) {
  const char* what = "candidate_blocks";
  validate_count(what, "block", in.block, 1024);
  validate_count(what, "keep", in.keep, kTopkMax);
  validate_rows(what, in.scores, in.lengths, [&](int64_t t, int64_t j) {  // all but the newest
    const int64_t newest = (in.lengths.data[size_t(t)] + in.block - 1) / in.block - 1;
    return j / in.block != newest;
  });
}

int candidate_count(const CandidateTopkInputs& in, int64_t t) {
  const int64_t C = in.blocks.dim(1);
  int n = 0;
  while (n < C && in.blocks.data[size_t(t * C + n)] != -1) ++n;
  return n;
}

void validate_candidate_topk_inputs(const CandidateTopkInputs& in) {
  const char* what = "candidate_topk";
  validate_count(what, "block", in.block, 1024);
  validate_count(what, "top_k", in.top_k, kTopkMax);
  // Rows and lengths first (the blocks' range depends on them), scores' finiteness last.
  validate_row_shapes(what, in.scores, in.lengths);
  const int64_t T = in.scores.dim(0);
  if (in.blocks.shape.size() != 2 || in.blocks.dim(0) != T || in.blocks.dim(1) < 1 ||
      in.blocks.dim(1) > kTopkMax)
    throw_bad_input("{} input 'blocks': expected [{}, C in [1, {}]]", what, T, kTopkMax);
  const int64_t C = in.blocks.dim(1);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n_blocks = (in.lengths.data[size_t(t)] + in.block - 1) / in.block;
    const int count = candidate_count(in, t);
    for (int64_t i = 0; i < C; ++i) {
      const int32_t b = in.blocks.data[size_t(t * C + i)];
      if (i >= count && b != -1)
        throw_bad_input("{} input 'blocks'[{}, {}] = {}: after the row's first -1", what, t, i, b);
      if (i < count && (b < 0 || b >= n_blocks))
        throw_bad_input("{} input 'blocks'[{}, {}] = {}: outside the row's {} blocks", what, t, i,
                        b, n_blocks);
      if (i > 0 && i < count && b <= in.blocks.data[size_t(t * C + i - 1)])
        throw_bad_input("{} input 'blocks'[{}, {}] = {}: not above the one before", what, t, i, b);
    }
  }
  validate_read_scores(what, in.scores, in.lengths, [&](int64_t t, int64_t j) {
    const int32_t* row = in.blocks.ptr() + t * C;
    return std::binary_search(row, row + candidate_count(in, t), int32_t(j / in.block));
  });
}

void validate_index_logits_inputs(const IndexLogitsInputs& in) {
  const char* what = "index_logits";
  validate_store_options(in.keys, what);
  const KvFormatInfo f = kv_format_info(in.keys.format);
  if (in.keys.format != KvFormat::idx_mxfp4 && in.keys.format != KvFormat::idx_fp8)
    throw_bad_input("{}: keys of format {}: expected idx_mxfp4 or idx_fp8", what, f.name);
  if (in.key_pool.shape != Shape{kv_pool_bytes(in.keys)})
    throw_bad_input("{} input 'key_pool': expected [{}] bytes ({} slots of {})", what,
                    kv_pool_bytes(in.keys), in.keys.pool_slots, f.name);
  if (in.heads < 1 || in.heads > kIndexMaxHeads)
    throw_bad_input("{}: heads {} outside [1, {}]", what, in.heads, kIndexMaxHeads);
  if (in.ratio < 1 || in.ratio > 1024)
    throw_bad_input("{}: ratio {} outside [1, 1024]", what, in.ratio);
  if (in.start < 0 || in.start > (int64_t{1} << 40))
    throw_bad_input("{}: start position {} outside [0, 2^40]", what, in.start);
  if (in.w.shape.size() != 2 || in.w.dim(0) < 1 || in.w.dim(1) != in.heads ||
      in.w.dim(0) > (1 << 20))
    throw_bad_input("{} input 'w': expected [T in [1, 2^20], {}]", what, in.heads);
  const int64_t T = in.w.dim(0);
  require_finite(in.w, fmt::format("{} input", what), "w");
  if (!(in.weight_scale > 0) || !std::isfinite(in.weight_scale))
    throw_bad_input("{}: weight_scale {} is not a positive finite number", what, in.weight_scale);
  if (in.q_records.shape != Shape{T * in.heads * f.record_bytes()})
    throw_bad_input("{} input 'q_records': expected [{}] bytes ({} x {} records of {})", what,
                    T * in.heads * f.record_bytes(), T, in.heads, f.name);
  const int64_t pages = (in.n_keys + in.keys.page_size - 1) / in.keys.page_size;
  if (in.n_keys < 0 || in.n_keys > (int64_t{1} << 30) || in.page_table.shape != Shape{pages})
    throw_bad_input("{} input 'page_table': expected [{}] pages for {} keys of {} per page", what,
                    pages, in.n_keys, in.keys.page_size);
  const int64_t pool_pages = in.keys.pool_slots / in.keys.page_size;
  for (int64_t p = 0; p < pages; ++p) {
    const int32_t page = in.page_table.data[size_t(p)];
    if (page < 0 || page >= pool_pages)
      throw_bad_input("{} input 'page_table'[{}] = {}: past the pool's {} pages", what, p, page,
                      pool_pages);
  }
}

}  // namespace tandem
