#include "reference/model_cache.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "problem/indexer.hpp"
#include "problem/sparse_attn.hpp"
#include "reference/indexer.hpp"
#include "reference/kvcache.hpp"
#include "reference/model_util.hpp"  // projection_matrix
#include "reference/sparse_attn.hpp"

namespace tandem::reference {
namespace {

// Rows of W y_t for every token: [T, rows].
template <class S>
Tensor<S> project(const Mat<S>& m, const std::vector<Vec<S>>& y) {
  Tensor<S> out({int64_t(y.size()), m.rows()});
  for (size_t t = 0; t < y.size(); ++t) {
    const Vec<S> v = naive_matvec<S>(m, y[t]);
    std::copy(v.data(), v.data() + v.size(), out.ptr() + int64_t(t) * m.rows());
  }
  return out;
}

// A pool (poisoned) with record i in slot i.
Tensor<uint8_t> pool_of(const KvStoreOptions& o, const std::vector<std::vector<uint8_t>>& records) {
  Tensor<uint8_t> pool({kv_pool_bytes(o)}, kKvPoison);
  const KvPageLayout at{kv_format_info(o.format), o.page_size};
  for (size_t i = 0; i < records.size(); ++i)
    copy_record_in(at, records[i].data(), int64_t(i), pool.ptr());
  return pool;
}
KvCompressState empty_state(const KvCompressor& c) {
  return {Tensor<float>({c.state_rows(), c.width()}, 0.0f),
          Tensor<float>({c.state_rows(), c.width()}, -std::numeric_limits<float>::infinity())};
}

}  // namespace

template <class S>
void tap_and_snap(const std::string& name, Tensor<S>& values, const TapSink& tap,
                  const ForcedTaps* forced) {
  tap(name, tensor_cast<double>(values));
  if (!forced) return;
  const auto it = forced->find(name);
  if (it == forced->end() || it->second.shape != values.shape) return;
  for (size_t i = 0; i < values.data.size(); ++i) {
    const float theirs = it->second.data[i];
    const uint16_t own = bf16_encode(float(values.data[i])), other = bf16_encode(theirs);
    const bool is_bf16 = bf16_decode(other) == theirs;  // NaN never: its tap fails instead
    if (is_bf16 && (own ^ other) < 0x8000 && std::abs(int(own) - int(other)) <= 1)
      values.data[i] = S(theirs);
  }
}

template <class S>
Tensor<uint8_t> tap_records(const std::string& name, const Tensor<S>& stored, KvFormat f,
                            const TapSink& tap, const ForcedTaps* forced) {
  const int64_t n = stored.dim(0), dims = kv_format_info(f).dims();
  const int64_t bytes = kv_format_info(f).record_bytes();
  Tensor<uint8_t> records({n, bytes});
  const Tensor<float> values = tensor_cast<float>(stored);
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<uint8_t> row =
        record_row(f, std::span<const float>(values.ptr() + r * dims, size_t(dims)));
    std::copy(row.begin(), row.end(), records.ptr() + r * bytes);
  }
  if (forced)
    if (const auto it = forced->find(name + kRecordsSuffix);
        it != forced->end() && it->second.shape == records.shape)
      std::copy(it->second.data.begin(), it->second.data.end(), records.data.begin());
  tap(name, tensor_cast<double>(stored));
  tap(name + kRecordsSuffix, tensor_cast<double>(records));
  return records;
}

template <class S>
LoraMats<S> lora_mats(const ModelWeights::Attention& w) {
  return {projection_matrix<S>(w.wq_a), projection_matrix<S>(w.wq_b), projection_matrix<S>(w.wo_a),
          projection_matrix<S>(w.wo_b),
          Eigen::Map<const Eigen::VectorXf>(w.q_norm.ptr(), w.q_norm.size()).cast<S>()};
}

template <class S>
std::vector<Vec<S>> query_latent(const LoraMats<S>& w, const std::vector<Vec<S>>& y, double eps,
                                 const std::string& name, const TapSink& tap) {
  std::vector<Vec<S>> latent;
  for (const Vec<S>& row : y)
    latent.push_back(rms_norm<S>(naive_matvec<S>(w.wq_a, row), w.q_norm, S(eps)));
  tap(name + ".q_latent", rows_tensor(latent));
  return latent;
}

template <class S>
Tensor<S> head_queries(const LoraMats<S>& w, const std::vector<Vec<S>>& latent, int64_t heads,
                       double eps, const std::string& name, const TapSink& tap,
                       const ForcedTaps* forced) {
  constexpr int64_t D = kKvMainDims;
  Tensor<S> q = project<S>(w.wq_b, latent);
  q.shape = {int64_t(latent.size()), heads, D};
  const Vec<S> no_gain = Vec<S>::Ones(D);  // the release's per-head norm has no weight
  for (int64_t h = 0; h < q.dim(0) * heads; ++h) {
    Eigen::Map<Vec<S>> head(q.ptr() + h * D, D);
    head = rms_norm<S>(Vec<S>(head), no_gain, S(eps));
  }
  // The RoPE kernel reads the normed heads as bf16 (model_forced_taps rounds the kernels' tap
  // so), snapped there as well as after it: one bf16 step of a pair's larger element before the
  // rotation can be several of the smaller one's after it.
  tap_and_snap(name + ".q_proj", q, tap, forced);
  return q;
}

template <class S>
std::vector<Vec<S>> attention_output(const LoraMats<S>& w, const Tensor<S>& o, int groups,
                                     const std::string& name, const TapSink& tap) {
  const int64_t T = o.dim(0), per_group = o.dim(1) / groups * kKvMainDims;
  const int64_t rank = w.wo_a.rows() / groups;
  std::vector<Vec<S>> latent, f;
  for (int64_t t = 0; t < T; ++t) {
    Vec<S> l(groups * rank);
    for (int64_t g = 0; g < groups; ++g)
      l.segment(g * rank, rank) = naive_matvec<S>(
          w.wo_a.middleRows(g * rank, rank),
          Eigen::Map<const Vec<S>>(o.ptr() + (t * groups + g) * per_group, per_group));
    f.push_back(naive_matvec<S>(w.wo_b, l));
    latent.push_back(std::move(l));
  }
  tap(name + ".o_latent", rows_tensor(latent));
  return f;
}

#define TANDEM_ATTENTION_PROJECTIONS(S)                                                        \
  template LoraMats<S> lora_mats<S>(const ModelWeights::Attention&);                           \
  template std::vector<Vec<S>> query_latent<S>(const LoraMats<S>&, const std::vector<Vec<S>>&, \
                                               double, const std::string&, const TapSink&);    \
  template Tensor<S> head_queries<S>(const LoraMats<S>&, const std::vector<Vec<S>>&, int64_t,  \
                                     double, const std::string&, const TapSink&,               \
                                     const ForcedTaps*);                                       \
  template std::vector<Vec<S>> attention_output<S>(const LoraMats<S>&, const Tensor<S>&, int,  \
                                                   const std::string&, const TapSink&);
TANDEM_ATTENTION_PROJECTIONS(double)
TANDEM_ATTENTION_PROJECTIONS(float)
#undef TANDEM_ATTENTION_PROJECTIONS

template void tap_and_snap<double>(const std::string&, Tensor<double>&, const TapSink&,
                                   const ForcedTaps*);
template void tap_and_snap<float>(const std::string&, Tensor<float>&, const TapSink&,
                                  const ForcedTaps*);
template Tensor<uint8_t> tap_records<double>(const std::string&, const Tensor<double>&, KvFormat,
                                             const TapSink&, const ForcedTaps*);
template Tensor<uint8_t> tap_records<float>(const std::string&, const Tensor<float>&, KvFormat,
                                            const TapSink&, const ForcedTaps*);

template <class S>
ModelCache<S>::ModelCache(const ModelConfig& m, std::vector<ModelWeights::Attention> w)
    : m_(m), w_(std::move(w)), owned_(size_t(m.shape.blocks)) {}

template <class S>
KvStoreOptions ModelCache<S>::options(KvFormat f, int64_t records) const {
  return model_store_options(f, records, m_.residual.norm_eps);
}

template <class S>
void ModelCache<S>::keep_records(const std::string& name, const Tensor<S>& stored, KvFormat f,
                                 std::vector<std::vector<uint8_t>>& kept, const TapSink& tap,
                                 const ForcedTaps* forced) const {
  if (stored.dim(0) == 0) return;
  const Tensor<uint8_t> records = tap_records(name, stored, f, tap, forced);
  const int64_t bytes = records.dim(1);
  for (int64_t r = 0; r < records.dim(0); ++r)
    kept.emplace_back(records.ptr() + r * bytes, records.ptr() + (r + 1) * bytes);
}

template <class S>
void ModelCache<S>::compress(int b, const Tensor<float>& x, int64_t start, const TapSink& tap,
                             const ForcedTaps* forced) {
  Owned& mine = owned_[size_t(b)];
  const ModelWeights::Attention& w = w_[size_t(b)];
  const int64_t d = x.dim(1);
  KvCompressInputs in;
  in.store = options(KvFormat::v41_fp4, 1);
  in.comp = v41_compressor(m_.shape.compress_ratios[size_t(b)]);
  in.wkv = w.comp_wkv, in.wgate = w.comp_wgate, in.norm_w = w.comp_norm;
  in.decode = true;
  Tensor<S> stored({0, kKvMainDims});
  for (int64_t t = 0; t < x.dim(0); ++t) {  // decode steps: any chunking builds the same cache
    in.x = Tensor<float>({1, d}, std::vector<float>(x.ptr() + t * d, x.ptr() + (t + 1) * d));
    in.pos = start + t;
    in.state = mine.states.empty() ? empty_state(in.comp) : mine.states.back();
    const KvRun<S> run = kv_compress<S, ActOf<S>>(in);
    mine.states.push_back({tensor_cast<float>(run.state_a), tensor_cast<float>(run.state_b)});
    if (run.stored.dim(0) == 0) continue;
    stored.data.insert(stored.data.end(), run.stored.data.begin(), run.stored.data.end());
    mine.latents.emplace_back(run.latent.data.begin(), run.latent.data.end());
  }
  stored.shape = {int64_t(stored.data.size()) / kKvMainDims, kKvMainDims};
  keep_records(fmt::format("block{}.attn.entries", b), stored, KvFormat::v41_fp4, mine.entries, tap,
               forced);
}

template <class S>
void ModelCache<S>::select(int b, const std::vector<Vec<S>>& y, const std::vector<Vec<S>>& q_latent,
                           int64_t start, const TapSink& tap, const ForcedTaps* forced) {
  const ModelShape& s = m_.shape;
  const std::string name = fmt::format("block{}.attn", b);
  const int ratio = s.compress_ratios[size_t(b)];
  Owned& mine = owned_[size_t(b)];
  const ModelWeights::Attention& w = w_[size_t(b)];
  const std::vector<std::vector<float>>& latents = owned_[size_t(s.kv_source(b))].latents;
  // Index keys of the source's new entries: MXFP4(RoPE(RMSNorm(Wk latent_j))) at position r j.
  const int64_t first = int64_t(mine.index_keys.size()), N = int64_t(latents.size());
  Tensor<float> latent({N - first, kKvMainDims});
  std::vector<int64_t> positions;
  for (int64_t j = first; j < N; ++j) {
    std::copy(latents[size_t(j)].begin(), latents[size_t(j)].end(),
              latent.ptr() + (j - first) * kKvMainDims);
    positions.push_back(j * ratio);
  }
  keep_records(name + ".index_keys",
               project_records<S, ActOf<S>>(options(KvFormat::idx_mxfp4, 1), latent, w.index_wk,
                                            w.index_norm, positions),
               KvFormat::idx_mxfp4, mine.index_keys, tap, forced);
  // The chunk's index queries [T, heads, 128] (RoPE'd, MXFP4) and head weights [T, heads].
  const int64_t T = int64_t(y.size()), H = s.index_heads;
  Tensor<S> q = project<S>(as_matrix<S>(w.index_wq), q_latent);
  q.shape = {T, H, kIndexKeyDims};
  q = rope_queries<S, ActOf<S>>(std::move(q), start, options(KvFormat::idx_mxfp4, 1).rope_theta);
  std::vector<std::vector<uint8_t>> q_records;
  keep_records(name + ".index_q", Tensor<S>({T * H, kIndexKeyDims}, q.data), KvFormat::idx_mxfp4,
               q_records, tap, forced);
  mine.selection = Tensor<int32_t>({T, s.index_topk}, -1);
  if (N > 0) {  // nothing to score before the first entry
    IndexLogitsInputs li;
    li.keys = options(KvFormat::idx_mxfp4, N);
    li.key_pool = pool_of(li.keys, mine.index_keys);
    li.page_table = model_page_table(N);
    li.n_keys = N, li.ratio = ratio, li.start = start, li.heads = int(H);
    for (const auto& r : q_records)
      li.q_records.data.insert(li.q_records.data.end(), r.begin(), r.end());
    li.q_records.shape = {int64_t(li.q_records.data.size())};
    li.w = tensor_cast<float>(project<S>(as_matrix<S>(w.index_w), y));
    li.weight_scale = release_index_weight_scale(int(H));  // as the release scales weights_proj(x)
    TopkInputs tk;
    // NOTE: the truth's scores select in float (the top-k's input dtype); two scores closer
    // than a float step are a tie for both.
    tk.scores = tensor_cast<float>(index_logits<S>(li));
    tk.lengths = Tensor<int32_t>({T});
    for (int64_t t = 0; t < T; ++t)
      tk.lengths.data[size_t(t)] = int32_t(visible_entries(start + t, ratio, N));
    tk.top_k = s.index_topk;
    mine.selection = topk_select(tk);
  }
  tap(name + kSelectionSuffix, tensor_cast<double>(mine.selection));
}

template <class S>
std::vector<Vec<S>> ModelCache<S>::attend(int b, const std::vector<Vec<S>>& y, int64_t start,
                                          const TapSink& tap, const ForcedTaps* forced) {
  const ModelShape& s = m_.shape;
  const ModelWeights::Attention& w = w_[size_t(b)];
  const int64_t T = int64_t(y.size()), d = m_.residual.d, H = s.heads;
  const int source = s.kv_source(b), selector = s.index_source(b);
  const std::string name = fmt::format("block{}.attn", b);
  if (source == b) {
    // The store kernels read the sublayer input as bf16.
    Tensor<float> x({T, d});
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < d; ++i)
        x.data[size_t(t * d + i)] = float(store<bf16>(y[size_t(t)](i)));
    KvWindowInputs win;
    win.store = options(KvFormat::v41_window, 1);
    win.window = s.window, win.start = start;
    win.x = x, win.wkv = w.window_wkv, win.norm_w = w.window_norm;
    keep_records(name + ".window", kv_window_store<S, ActOf<S>>(win).stored, KvFormat::v41_window,
                 owned_[size_t(b)].window, tap, forced);
    if (s.compress_ratios[size_t(b)] > 0) compress(b, x, start, tap, forced);
  }
  const double eps = m_.residual.norm_eps;
  const LoraMats<S> lora = lora_mats<S>(w);  // generated here: 75M values at V4.1's widths
  const std::vector<Vec<S>> latent = query_latent<S>(lora, y, eps, name, tap);
  if (s.is_index_source(b)) select(b, y, latent, start, tap, forced);
  const Owned& cache = owned_[size_t(source)];
  SparseAttnInputs in;
  in.heads = int(H), in.start = start;
  Tensor<S> q = head_queries<S>(lora, latent, H, eps, name, tap, forced);
  // The queries are stored bf16 before and after their RoPE (the kernels' input dtype): both
  // roundings belong to the model, in the truth too, so that the kernels' queries differ from it
  // only where a value sits within a rounding of a bf16 boundary (then snapped).
  q = rope_queries<S, bf16>(std::move(q), start, in.rope_theta);
  tap_and_snap(name + ".q", q, tap, forced);
  in.q = tensor_cast<float>(q);
  in.sinks = w.sinks;
  const int64_t positions = int64_t(cache.window.size()), entries = int64_t(cache.entries.size());
  in.window = options(KvFormat::v41_window, positions);
  in.window_pool = pool_of(in.window, cache.window);
  in.window_idx = model_window_indices(start, T, s.window, positions);
  in.comp = options(KvFormat::v41_fp4, entries);
  in.comp_pool = pool_of(in.comp, cache.entries);
  in.page_table = model_page_table(entries);
  in.n_comp = entries;
  in.comp_idx = selector < 0 ? Tensor<int32_t>({T, 0}) : owned_[size_t(selector)].selection;
  SparseAttnRun<S> run = sparse_attn<S, ActOf<S>>(in);
  tap_and_snap(name + ".o", run.o, tap, forced);
  return attention_output<S>(lora, run.o, s.lora.o_groups, name, tap);
}

template <class S>
void ModelCache<S>::rollback(int64_t length) {
  const ModelShape& s = m_.shape;
  for (int b = 0; b < s.blocks; ++b) {
    Owned& o = owned_[size_t(b)];
    const int r = s.compress_ratios[size_t(b)];
    o.window.resize(std::min(o.window.size(), size_t(length)));
    o.states.resize(std::min(o.states.size(), size_t(length)));
    if (r == 0) continue;
    const size_t entries = size_t(length / r);
    o.entries.resize(std::min(o.entries.size(), entries));
    o.latents.resize(std::min(o.latents.size(), entries));
    o.index_keys.resize(std::min(o.index_keys.size(), entries));
  }
}

template <class S>
std::vector<double> ModelCache<S>::snapshot() const {
  std::vector<double> v;
  auto bytes = [&](const std::vector<std::vector<uint8_t>>& records) {
    for (const auto& r : records) v.insert(v.end(), r.begin(), r.end());
  };
  for (const Owned& o : owned_) {
    bytes(o.window);
    if (!o.states.empty()) {
      v.insert(v.end(), o.states.back().a.data.begin(), o.states.back().a.data.end());
      v.insert(v.end(), o.states.back().b.data.begin(), o.states.back().b.data.end());
    }
    bytes(o.entries);
    bytes(o.index_keys);
  }
  return v;
}

template class ModelCache<double>;
template class ModelCache<float>;

}  // namespace tandem::reference
