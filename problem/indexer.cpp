#include "problem/indexer.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"

namespace tandem {

void validate_topk_inputs(const TopkInputs& in) {
  if (in.scores.shape.size() != 2 || in.scores.dim(0) < 1 || in.scores.dim(1) < 1 ||
      in.scores.dim(0) > (int64_t{1} << 24) || in.scores.dim(1) > (int64_t{1} << 30))
    throw_bad_input("topk input 'scores': expected [T in [1, 2^24], N in [1, 2^30]]");
  if (in.top_k < 1 || in.top_k > kTopkMax)
    throw_bad_input("topk: top_k {} outside [1, {}]", in.top_k, kTopkMax);
  const int64_t T = in.scores.dim(0), N = in.scores.dim(1);
  if (in.lengths.shape != Shape{T})
    throw_bad_input("topk input 'lengths': expected [{}] (one per row of scores)", T);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t len = in.lengths.data[size_t(t)];
    if (len < 0 || len > N)
      throw_bad_input("topk input 'lengths'[{}] = {}: outside [0, {}]", t, len, N);
    for (int64_t j = 0; j < len; ++j) {
      const float s = in.scores.data[size_t(t * N + j)];
      if (!std::isfinite(s))
        throw_bad_input("topk input 'scores'[{}, {}] is {} (within the row's length)", t, j, s);
    }
  }
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
  for (size_t i = 0; i < in.w.data.size(); ++i)
    if (!std::isfinite(in.w.data[i])) throw_bad_input("{} input 'w'[{}] is not finite", what, i);
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
