#include "cases/sparse_attn_case.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "cases/kvcache_case.hpp"  // kv_store_options
#include "reference/kvcache.hpp"
#include "reference/sparse_attn.hpp"
#include "sim/sparse_attn_traffic.hpp"

namespace tandem {
namespace {

Tensor<float> bf16_values(Shape shape, uint64_t seed, uint32_t id, float lo, float hi) {
  Tensor<float> t = seeded_tensor(std::move(shape), seed, id, lo, hi);
  for (float& v : t.data) v = bf16_decode(bf16_encode(v));
  return t;
}

}  // namespace

SparseAttnInputs make_sparse_attn_inputs(const SparseAttnShape& s, uint64_t seed) {
  SparseAttnInputs in;
  in.heads = s.heads, in.start = s.start;
  const KvFormat wf = s.v41 ? KvFormat::v41_window : KvFormat::model1;
  const KvFormat cf = s.v41 ? KvFormat::v41_fp4 : KvFormat::model1;
  // The ring: every slot holds a record (positions before the sequence start read -1 instead).
  in.window = kv_store_options(wf, s.window, s.page_size, 1e-6);
  std::vector<int64_t> ring(size_t(s.window));
  for (int i = 0; i < s.window; ++i) ring[size_t(i)] = i;
  in.window_pool =
      reference::encode_pool(in.window, bf16_values({s.window, kKvMainDims}, seed, 1, -2, 2), ring);
  in.window_idx = Tensor<int32_t>({s.tokens, s.window});
  for (int64_t t = 0; t < s.tokens; ++t) {
    const std::vector<int32_t> list = window_index_list(s.start + t, s.window);
    std::copy(list.begin(), list.end(), in.window_idx.ptr() + t * s.window);
  }
  // The compressed cache in a seeded permutation of pages (one pool page more, left poisoned).
  const int64_t pages = (s.n_comp + s.page_size - 1) / s.page_size;
  in.comp = kv_store_options(cf, (pages + 1) * s.page_size, s.page_size, 1e-6);
  in.n_comp = s.n_comp;
  const std::vector<int64_t> order = shuffled_order(pages + 1, uint32_t(seed));
  in.page_table = Tensor<int32_t>({pages});
  std::vector<int64_t> slots;
  for (int64_t p = 0; p < pages; ++p) in.page_table.data[size_t(p)] = int32_t(order[size_t(p)]);
  for (int64_t j = 0; j < s.n_comp; ++j)
    slots.push_back(int64_t(in.page_table.data[size_t(j / s.page_size)]) * s.page_size +
                    j % s.page_size);
  in.comp_pool =
      reference::encode_pool(in.comp, bf16_values({s.n_comp, kKvMainDims}, seed, 2, -2, 2), slots);
  // Each token selects top_k distinct visible entries (a seeded shuffle), -1 padded.
  in.comp_idx = Tensor<int32_t>({s.tokens, s.top_k}, -1);
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t visible = std::min<int64_t>(s.n_comp, (s.start + t + 1) / s.ratio);
    const std::vector<int64_t> pick =
        shuffled_order(std::max<int64_t>(visible, 1), uint32_t(seed + t));
    for (int64_t i = 0; i < std::min<int64_t>(s.top_k, visible); ++i)
      in.comp_idx.data[size_t(t * s.top_k + i)] = int32_t(pick[size_t(i)]);
  }
  in.q = bf16_values({s.tokens, s.heads, kKvMainDims}, seed, 3, -3, 3);
  in.sinks = seeded_tensor({s.heads}, seed, 4, -1.0f, 3.0f);
  in.sinks.data[0] = -INFINITY;  // head 0 without a sink
  return in;
}

namespace {

// Each row of idx in the id-th seeded order.
Tensor<int32_t> shuffled_rows(const Tensor<int32_t>& idx, uint32_t id) {
  Tensor<int32_t> r = idx;
  const int64_t n = idx.dim(1);
  for (int64_t t = 0; t < idx.dim(0); ++t) {
    const std::vector<int64_t> p = shuffled_order(n, id * 7919 + uint32_t(t));
    for (int64_t i = 0; i < n; ++i)
      r.data[size_t(t * n + i)] = idx.data[size_t(t * n + p[size_t(i)])];
  }
  return r;
}

}  // namespace

// The inputs with each row's indices in another seeded order (the same sets): another draw of
// the float baseline's summation error.
SparseAttnInputs reordered(const SparseAttnInputs& in, uint32_t id) {
  SparseAttnInputs r = in;
  r.window_idx = shuffled_rows(in.window_idx, 2 * id);
  r.comp_idx = shuffled_rows(in.comp_idx, 2 * id + 1);
  return r;
}

SparseAttnReference run_sparse_attn_reference(const SparseAttnInputs& in) {
  const auto truth = reference::sparse_attn<double, double>(in);
  const auto base = reference::sparse_attn<float, bf16>(in);
  SparseAttnReference r{truth.o, tensor_cast<double>(base.o), truth.lse,
                        tensor_cast<double>(base.lse)};
  // A token's lse row holds one value per head: orders enough for 64 draws a row.
  const int64_t runs = std::max<int64_t>(2, (kMinRowErrorDraws + in.heads - 1) / in.heads);
  for (int64_t k = 1; k < runs; ++k) {
    const auto other = reference::sparse_attn<float, bf16>(reordered(in, uint32_t(k)));
    keep_farthest(r.o_baseline, tensor_cast<double>(other.o), r.o);
    keep_farthest(r.lse_baseline, tensor_cast<double>(other.lse), r.lse);
  }
  return r;
}

std::vector<TensorCheck> compare_sparse_attn(const SparseAttnReference& ref,
                                             const SparseAttnOutputs& out) {
  return {
      tolerance_check("o", ref.o, ref.o_baseline, out.o, OutDType::BF16, kKvMainDims),
      tolerance_check("lse", ref.lse, ref.lse_baseline, out.lse, OutDType::F32, ref.lse.dim(1))};
}

// ================================================================ the sparse_attn component
namespace {

VerifyRow verify_sparse_attn(const SparseAttnShape& s, uint64_t seed, const RunOptions& opt) {
  const SparseAttnInputs in = make_sparse_attn_inputs(s, seed);
  return verify_kernel_row<SparseAttnOutputs>(
      {.component = "sparse_attn",
       .name = fmt::format("decode/{} T={} H={} window {} + top-{} of {} r={} pos {}..",
                           s.v41 ? "v41" : "v4", s.tokens, s.heads, s.window, s.top_k, s.n_comp,
                           s.ratio, s.start),
       .run = [&](const RunOptions& o) { return run_sparse_attn(in, o); },
       .compare =
           [&](const SparseAttnOutputs& out) {
             return compare_sparse_attn(run_sparse_attn_reference(in), out);
           },
       .same =
           [](const SparseAttnOutputs& a, const SparseAttnOutputs& b) {
             return compare_exact<float>(a.o.span(), b.o.span()).pass &&
                    compare_exact<float>(a.lse.span(), b.lse.span()).pass;
           },
       .predicted = [&] { return LaunchLog{sim::predict_sparse_attn(in)}; },
       .bytes = "valid records once a head group"},
      opt);
}

}  // namespace

Component sparse_attn_component() {
  Component c;
  c.name = "sparse_attn";
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    const int64_t T = model.residual.tokens;
    const uint64_t seed = model.seed;
    SparseAttnShape v41{.v41 = true, .tokens = T}, v4{.v41 = false, .tokens = T};
    v4.start = 60;  // the ring still filling, fewer visible entries than k
    return std::vector<VerifyJob>{
        {"sparse_attn v41", [=, &opt] { return verify_sparse_attn(v41, seed, opt); }},
        {"sparse_attn v4", [=, &opt] { return verify_sparse_attn(v4, seed + 1, opt); }}};
  };
  c.golden_specs = [] { return std::vector<GoldenSpec>{}; };
  c.check = [](const LoadedCase& c, const RunOptions&) -> CaseReport {
    throw_bad_input("{}: sparse_attn has no golden cases yet", c.name);
  };
  return c;
}

}  // namespace tandem
