#include "problem/sparse_attn.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {

bool sparse_attn_formats_supported(KvFormat window, KvFormat comp) {
  return (window == KvFormat::model1 && comp == KvFormat::model1) ||
         (window == KvFormat::v41_window && comp == KvFormat::v41_fp4);
}

namespace {

// Every index of `idx` is -1 or inside [0, limit).
void require_indices(const Tensor<int32_t>& idx, int64_t T, int64_t limit, const char* name) {
  if (idx.shape.size() != 2 || idx.dim(0) != T || idx.dim(1) > (int64_t{1} << 20))
    throw_bad_input("sparse_attn input '{}': expected [{}, n <= 2^20]", name, T);
  for (size_t i = 0; i < idx.data.size(); ++i) {
    const int32_t v = idx.data[i];
    if (v != -1 && (v < 0 || v >= limit))
      throw_bad_input("sparse_attn input '{}'[{}, {}] = {}: neither -1 nor in [0, {})", name,
                      i / size_t(idx.dim(1)), i % size_t(idx.dim(1)), v, limit);
  }
}

}  // namespace

void validate_sparse_attn_inputs(const SparseAttnInputs& in) {
  const char* what = "sparse_attn";
  validate_store_options(in.window, what);
  validate_store_options(in.comp, what);
  if (!sparse_attn_formats_supported(in.window.format, in.comp.format))
    throw_bad_input(
        "{}: window {} with compressed {}: expected model1 + model1 (V4) or "
        "v41_window + v41_fp4 (V4.1)",
        what, kv_format_name(in.window.format), kv_format_name(in.comp.format));
  if (in.heads < 1 || in.heads > kSparseAttnMaxHeads || in.heads % kSparseAttnHeadGroup)
    throw_bad_input("{}: heads {}: a multiple of {} in [{}, {}]", what, in.heads,
                    kSparseAttnHeadGroup, kSparseAttnHeadGroup, kSparseAttnMaxHeads);
  if (in.q.shape.size() != 3 || in.q.dim(0) < 1 || in.q.dim(0) > (1 << 20) ||
      in.q.dim(1) != in.heads || in.q.dim(2) != kKvMainDims)
    throw_bad_input("{} input 'q': expected [T in [1, 2^20], {}, {}]", what, in.heads, kKvMainDims);
  require_finite(in.q, fmt::format("{} input", what), "q");
  if (in.sinks.shape != Shape{in.heads})
    throw_bad_input("{} input 'sinks': expected [{}]", what, in.heads);
  for (size_t h = 0; h < in.sinks.data.size(); ++h)
    if (std::isnan(in.sinks.data[h]) || in.sinks.data[h] == INFINITY)
      throw_bad_input("{} input 'sinks'[{}] is {} (finite, or -inf for none)", what, h,
                      in.sinks.data[h]);
  if (in.start < 0 || in.start > (int64_t{1} << 40))
    throw_bad_input("{}: start position {} outside [0, 2^40]", what, in.start);
  if (!(in.rope_theta >= 1 && in.rope_theta <= 1e9))
    throw_bad_input("{}: rope_theta {} outside [1, 1e9]", what, in.rope_theta);
  if (in.window_pool.shape != Shape{kv_pool_bytes(in.window)})
    throw_bad_input("{} input 'window_pool': expected [{}] bytes", what, kv_pool_bytes(in.window));
  if (in.comp_pool.shape != Shape{kv_pool_bytes(in.comp)})
    throw_bad_input("{} input 'comp_pool': expected [{}] bytes", what, kv_pool_bytes(in.comp));
  const int64_t T = in.q.dim(0);
  require_indices(in.window_idx, T, in.window.pool_slots, "window_idx");
  const int64_t pages = (in.n_comp + in.comp.page_size - 1) / in.comp.page_size;
  if (in.n_comp < 0 || in.n_comp > (int64_t{1} << 30) || in.page_table.shape != Shape{pages})
    throw_bad_input("{} input 'page_table': expected [{}] pages for {} entries", what, pages,
                    in.n_comp);
  const int64_t pool_pages = in.comp.pool_slots / in.comp.page_size;
  for (int64_t p = 0; p < pages; ++p)
    if (in.page_table.data[size_t(p)] < 0 || in.page_table.data[size_t(p)] >= pool_pages)
      throw_bad_input("{} input 'page_table'[{}] = {}: past the pool's {} pages", what, p,
                      in.page_table.data[size_t(p)], pool_pages);
  require_indices(in.comp_idx, T, in.n_comp, "comp_idx");
}

void validate_rope_queries_inputs(const RopeQueriesInputs& in) {
  const char* what = "rope_queries";
  if (in.q.shape.size() != 3 || in.q.dim(0) < 1 || in.q.dim(0) > (1 << 20) || in.q.dim(1) < 1 ||
      in.q.dim(1) > kRopeQueryMaxHeads ||
      (in.q.dim(2) != kIndexKeyDims && in.q.dim(2) != kKvMainDims))
    throw_bad_input("{} input 'q': expected [T in [1, 2^20], heads in [1, {}], {} or {}]", what,
                    kRopeQueryMaxHeads, kIndexKeyDims, kKvMainDims);
  require_finite(in.q, fmt::format("{} input", what), "q");
  if (in.start < 0 || in.start > (int64_t{1} << 40))
    throw_bad_input("{}: start position {} outside [0, 2^40]", what, in.start);
  if (!(in.rope_theta >= 1 && in.rope_theta <= 1e9))
    throw_bad_input("{}: rope_theta {} outside [1, 1e9]", what, in.rope_theta);
}

}  // namespace tandem
