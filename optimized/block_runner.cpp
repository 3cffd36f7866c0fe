#include "optimized/block_runner.hpp"

#include <algorithm>
#include <numeric>

#include "core/vision_config.hpp"  // moe_materialises_every_expert
#include "optimized/dense.hpp"
#include "optimized/residual.hpp"
#include "optimized/sparse_attn.hpp"

namespace tandem {
namespace {

// The experts `ids` of a table, generated: [ids, r, c].
Tensor<float> stacked(const std::vector<SeededMatrix>& experts, const std::vector<int32_t>& ids) {
  const SeededMatrix& first = experts[0];
  Tensor<float> t({int64_t(ids.size()), first.rows, first.cols});
  for (size_t i = 0; i < ids.size(); ++i)
    experts[size_t(ids[i])].rows_into(0, first.rows,
                                      t.ptr() + int64_t(i) * first.rows * first.cols);
  return t;
}

}  // namespace

SeededExperts::SeededExperts(const std::vector<SeededMatrix>& w_in,
                             const std::vector<SeededMatrix>& w_out)
    : w_in_(&w_in), w_out_(&w_out) {
  if (w_in.empty() ||
      !moe_materialises_every_expert(int64_t(w_in.size()), w_out[0].cols, w_in[0].cols))
    return;
  std::vector<int32_t> every(w_in.size());
  std::iota(every.begin(), every.end(), 0);
  held_in_ = stacked(w_in, every), held_out_ = stacked(w_out, every);
}

void SeededExperts::bind(MoeExpertInputs& in) const {
  if (!held_in_.data.empty()) {
    in.w_in = held_in_, in.w_out = held_out_;
    return;
  }
  const std::vector<int32_t> routed = routed_experts(in.experts);
  renumber_routing(in.experts, routed);
  in.w_in = stacked(*w_in_, routed), in.w_out = stacked(*w_out_, routed);
}

void BlockRunner::start_chunk(Tensor<float> x) {
  x_ = std::move(x), y_ = {}, f_ = {}, coef_ = {}, pending_.clear();
}

void BlockRunner::boundary(const ResidualSiteWeights& next, const std::string& name) {
  ResidualBoundaryInputs in{cfg_, ActDType::f32, x_, f_, coef_, next};
  const ResidualBoundaryOutputs o = run_residual_boundary(in, opt_);
  log(o.launches);
  if (!f_.data.empty()) x_ = o.x, tap(pending_ + ".x", x_), f_ = {};
  if (next.norm_w.data.empty()) return;  // closed only: coef_ keeps the pre to carry
  y_ = o.y, coef_ = o.coef, pending_ = name;
  tap(name + ".y", y_);
}

void BlockRunner::tap(std::string name, const Tensor<float>& v) {
  out_.taps.push_back({std::move(name), v});
}
void BlockRunner::log(const LaunchLog& l) {
  out_.launches.insert(out_.launches.end(), l.begin(), l.end());
}

Tensor<float> BlockRunner::dense(const Tensor<float>& x, Tensor<float> w, int groups) {
  DenseOutputs o = run_dense_rows({ActDType::f32, x, std::move(w), {}, false, groups}, opt_);
  log(o.launches);
  return std::move(o.y);
}

Tensor<float> BlockRunner::unembed(const Projection& w) {
  const int64_t T = y_.dim(0), V = w.shape()[0];
  Tensor<float> logits({T, V});
  for (int64_t first = 0; first < V; first += kUnembedChunkRows) {
    const int64_t n = std::min(kUnembedChunkRows, V - first);
    const Tensor<float> part = dense(y_, w.row_block(first, n));
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(part.ptr() + t * n, n, logits.ptr() + t * V + first);
  }
  return logits;
}

Tensor<float> BlockRunner::rms_norm(Tensor<float> u, Tensor<float> w) {
  RmsNormOutputs o =
      run_rms_norm_rows({ActDType::f32, std::move(u), std::move(w), cfg_.norm_eps}, opt_);
  log(o.launches);
  return std::move(o.y);
}

Tensor<float> BlockRunner::rope(Tensor<float> q, int64_t heads, int64_t dims, int64_t start) {
  q.shape = {q.dim(0), heads, dims};
  RopeQueriesOutputs o = run_rope_queries({start, KvStoreOptions{}.rope_theta, std::move(q)}, opt_);
  log(o.launches);
  return std::move(o.q);
}

Tensor<float> BlockRunner::query_latent(const ModelWeights::Attention& w) {
  Tensor<float> latent = rms_norm(dense(y_, w.wq_a.values()), w.q_norm);
  tap(pending_ + ".q_latent", latent);
  return latent;
}

Tensor<float> BlockRunner::queries(const ModelWeights::Attention& w, const Tensor<float>& latent,
                                   int64_t heads, int64_t start) {
  const int64_t T = latent.dim(0);
  Tensor<float> projection = dense(latent, w.wq_b.values());
  projection.shape = {T * heads, kKvMainDims};  // a row per head: the per-head norm's
  projection = rms_norm(std::move(projection), {});
  projection.shape = {T, heads, kKvMainDims};
  tap(pending_ + ".q_proj", projection);
  Tensor<float> q = rope(std::move(projection), heads, kKvMainDims, start);
  tap(pending_ + ".q", q);
  return q;
}

void BlockRunner::attend(const SparseAttnInputs& in, const ModelWeights::Attention& w, int groups) {
  SparseAttnOutputs o = run_sparse_attn(in, opt_);
  log(o.launches);
  tap(pending_ + ".o", o.o);
  o.o.shape = {o.o.dim(0), int64_t(in.heads) * kKvMainDims};
  const Tensor<float> latent = dense(o.o, w.wo_a.values(), groups);
  tap(pending_ + ".o_latent", latent);
  f_ = dense(latent, w.wo_b.values());
  tap(pending_ + ".f", f_);
}

KvStoreOptions BlockRunner::options(KvFormat f, int64_t records) const {
  return model_store_options(f, records, cfg_.norm_eps);
}

void BlockRunner::tap_records(const std::string& name, const Tensor<float>& stored,
                              const Tensor<uint8_t>& pool, KvFormat f,
                              const std::vector<int64_t>& slots) {
  if (slots.empty()) return;
  tap(name, stored);
  const KvPageLayout at{kv_format_info(f), kModelKvPage};
  const int64_t bytes = at.f.record_bytes();
  std::vector<uint8_t> row(static_cast<size_t>(bytes));
  Tensor<float> records({int64_t(slots.size()), bytes});
  for (size_t i = 0; i < slots.size(); ++i) {
    copy_record_out(at, pool.ptr(), slots[i], row.data());
    std::copy(row.begin(), row.end(), records.ptr() + int64_t(i) * bytes);
  }
  tap(name + kRecordsSuffix, records);
}

}  // namespace tandem
