#include "cases/sparse_attn_case.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "cases/kvcache_case.hpp"  // kv_store_json, parse_kv_store
#include "core/json_fields.hpp"
#include "reference/kvcache.hpp"
#include "reference/residual.hpp"  // ScopedSumOrder
#include "reference/sparse_attn.hpp"
#include "sim/sparse_attn_traffic.hpp"

namespace tandem {
namespace {}  // namespace

SparseAttnInputs make_sparse_attn_inputs(const SparseAttnShape& s, uint64_t seed) {
  SparseAttnInputs in;
  in.heads = s.heads, in.start = s.start;
  const KvFormat wf = s.v41 ? KvFormat::v41_window : KvFormat::model1;
  const KvFormat cf = s.v41 ? KvFormat::v41_fp4 : KvFormat::model1;
  // The ring: every slot holds a record (positions before the sequence start read -1 instead).
  in.window = kv_store_options(wf, s.window, s.page_size, 1e-6);
  std::vector<int64_t> ring(size_t(s.window));
  for (int i = 0; i < s.window; ++i) ring[size_t(i)] = i;
  in.window_pool = reference::encode_pool(
      in.window, seeded_bf16_tensor({s.window, kKvMainDims}, seed, 1, -2, 2), ring);
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
  in.comp_pool = reference::encode_pool(
      in.comp, seeded_bf16_tensor({s.n_comp, kKvMainDims}, seed, 2, -2, 2), slots);
  // Each token selects top_k distinct visible entries (a seeded shuffle), -1 padded.
  in.comp_idx = Tensor<int32_t>({s.tokens, s.top_k}, -1);
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t visible = std::min<int64_t>(s.n_comp, (s.start + t + 1) / s.ratio);
    const std::vector<int64_t> pick =
        shuffled_order(std::max<int64_t>(visible, 1), uint32_t(seed + t));
    for (int64_t i = 0; i < std::min<int64_t>(s.top_k, visible); ++i)
      in.comp_idx.data[size_t(t * s.top_k + i)] = int32_t(pick[size_t(i)]);
  }
  in.q = seeded_bf16_tensor({s.tokens, s.heads, kKvMainDims}, seed, 3, -3, 3);
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
  // A token's lse row holds one value per head: orders enough for 64 draws a row. Each draw
  // sums the records in another order, and the scores' dot products alternately as a warp does
  // and in naive_dot's other orders, pairwise and rotations both ways (with one record, the dot's
  // order is the only thing to draw).
  const int64_t runs = std::max<int64_t>(2, (kMinRowErrorDraws + in.heads - 1) / in.heads);
  for (int64_t k = 1; k < runs; ++k) {
    const reference::ScopedSumOrder scoped(k % 2 == 1 ? reference::kWarpSumOrder : int(k / 2));
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

// A golden case's inputs: the generator's, and with `holes` a second head without a sink and a
// token that attends to nothing (every index -1, a batch's padding slot: o = 0, lse = +inf).
SparseAttnInputs golden_inputs(const SparseAttnShape& s, uint64_t seed, bool holes) {
  SparseAttnInputs in = make_sparse_attn_inputs(s, seed);
  if (!holes) return in;
  in.sinks.data[size_t(s.heads - 3)] = -INFINITY;
  const int64_t t = s.tokens / 2;
  std::fill_n(in.window_idx.ptr() + t * s.window, s.window, -1);
  std::fill_n(in.comp_idx.ptr() + t * s.top_k, s.top_k, -1);
  return in;
}

// The inputs named by for_each_tensor and the double truth (expected.o, expected.lse).
BuiltCase build_sparse_attn(const SparseAttnInputs& in) {
  BuiltCase b;
  b.config = {{"window", kv_store_json(in.window)},
              {"comp", kv_store_json(in.comp)},
              {"heads", in.heads},
              {"start", in.start},
              {"n_comp", in.n_comp},
              {"rope_theta", in.rope_theta}};
  for_each_tensor(in, [&](const char* name, const auto& t) { b.blob.put(name, t); });
  const auto truth = reference::sparse_attn<double, double>(in);
  b.blob.put("expected.o", truth.o);
  b.blob.put("expected.lse", truth.lse);
  b.outputs = {{"o", "tolerance"}, {"lse", "tolerance"}};
  return b;
}

// The reference now within 1e-12 of the stored truth, then the kernel against the stored truth
// under the tolerance policy (the baseline recomputed), as a verify row compares them.
CaseReport check_sparse_attn(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"window", "comp", "heads", "start", "n_comp", "rope_theta"});
  SparseAttnInputs in;
  in.window = parse_kv_store(config.object("window"));
  in.comp = parse_kv_store(config.object("comp"));
  for (const auto& [field, store] : {std::pair{"window", &in.window}, std::pair{"comp", &in.comp}})
    if (kv_pool_bytes(*store) > kMaxGoldenPoolBytes)
      throw_bad_input("{}: a pool of {} slots of {} takes {} bytes; golden cases keep it under {}",
                      config.where(std::string(field) + ".pool_slots"), store->pool_slots,
                      kv_format_name(store->format), kv_pool_bytes(*store), kMaxGoldenPoolBytes);
  in.heads = int(config.integer("heads", 1, kSparseAttnMaxHeads));
  in.start = config.integer("start", 0, int64_t{1} << 40);
  in.n_comp = config.integer("n_comp", 0, int64_t{1} << 30);
  in.rope_theta = config.number("rope_theta", 1, 1e9);
  for_each_tensor(in, [&](const char* name, auto& t) { load_tensor(c, name, t); });
  within_work(
      c, "heads x 512 x (window_idx + comp_idx)",
      double(in.heads) * kKvMainDims * (double(in.window_idx.size()) + double(in.comp_idx.size())));
  const SparseAttnOutputs out = run_sparse_attn(in, opt);  // validates the blob first
  SparseAttnReference ref = run_sparse_attn_reference(in);
  CaseReport report{c.name, {}};
  for (auto& [name, truth] : {std::pair{"o", &ref.o}, std::pair{"lse", &ref.lse}}) {
    const std::string key = std::string("expected.") + name;
    report.tensors.push_back(
        reference_check(name, doubles(*truth), c.blob.get(key, c.blob_source)));
    *truth = c.blob.get_as<double>(key, c.blob_source);
  }
  add_checks(report, compare_sparse_attn(ref, out), c.outputs);
  return report;
}

// The queries' RoPE on [T, heads, dims] seeded queries at positions start.. (dims 512: the
// attention's, 128: the indexer's), against the truth within bf16's tolerance.
VerifyRow verify_rope_queries(int64_t T, int64_t heads, int64_t dims, int64_t start, uint64_t seed,
                              const RunOptions& opt) {
  RopeQueriesInputs in;
  in.start = start;
  in.q = seeded_tensor({T, heads, dims}, seed, 1, -4.0f, 4.0f);
  return verify_kernel_row<RopeQueriesOutputs>(
      {.component = "sparse_attn",
       .name = fmt::format("rope_queries T={} H={} d{} pos {}..", T, heads, dims, start),
       .run = [&](const RunOptions& o) { return run_rope_queries(in, o); },
       .compare =
           [&](const RopeQueriesOutputs& out) {
             const Tensor<double> truth = reference::rope_queries<double, double>(
                 tensor_cast<double>(in.q), in.start, in.rope_theta);
             const Tensor<float> baseline =
                 reference::rope_queries<float, bf16>(in.q, in.start, in.rope_theta);
             return std::vector<TensorCheck>{
                 {"q", compare_to_truth(truth.span(), as_doubles(baseline), as_doubles(out.q),
                                        OutDType::BF16, dims)}};
           },
       .same = [](const RopeQueriesOutputs& a,
                  const RopeQueriesOutputs& b) { return a.q.data == b.q.data; },
       .predicted = [&] { return LaunchLog{sim::predict_rope_queries(T, heads, dims)}; },
       .bytes = "each row once"},
      opt);
}

}  // namespace

Component sparse_attn_component() {
  Component c;
  c.name = "sparse_attn";
  c.sections = {"residual", "model"};
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    const int64_t T = model.residual.tokens;
    const uint64_t seed = model.seed;
    SparseAttnShape v41{.v41 = true, .tokens = T}, v4{.v41 = false, .tokens = T};
    v4.start = 60;  // the ring still filling, fewer visible entries than k
    // The config's attention (V4.1-Flash's: 64 heads, a 128-token window and top-512): an r = 2
    // cache with twice the top-k entries visible, every selected slot valid.
    const ModelShape& m = model.shape;
    SparseAttnShape shaped{.v41 = true, .tokens = T, .heads = m.heads, .window = m.window};
    shaped.top_k = m.index_topk, shaped.ratio = 2;
    shaped.n_comp = 2 * int64_t(m.index_topk) + 3, shaped.start = 2 * shaped.n_comp;
    return std::vector<VerifyJob>{
        {"sparse_attn v41", [=, &opt] { return verify_sparse_attn(v41, seed, opt); },
         RowSizes::fixed},
        {"sparse_attn v4", [=, &opt] { return verify_sparse_attn(v4, seed + 1, opt); },
         RowSizes::fixed},
        {"sparse_attn model", [=, &opt] { return verify_sparse_attn(shaped, seed + 4, opt); }},
        {"sparse_attn rope_queries",
         [=, &opt] {
           return verify_rope_queries(T, model.shape.heads, kKvMainDims, 1000, seed + 2, opt);
         }},
        {"sparse_attn rope_queries index", [=, &opt] {
           return verify_rope_queries(T, model.shape.index_heads, kIndexKeyDims, 7, seed + 3, opt);
         }}};
  };
  // V4.1 while its ring fills, fewer entries visible than selected (-1 padded), two heads
  // without a sink and a token with nothing valid; V4 with the ring wrapped, a top-16 of 60.
  c.golden_specs = [] {
    return std::vector<GoldenSpec>{{"sparse_attn_v41", 1101,
                                    [](uint64_t seed) {
                                      return build_sparse_attn(golden_inputs({.v41 = true,
                                                                              .tokens = 4,
                                                                              .heads = 8,
                                                                              .window = 16,
                                                                              .n_comp = 7,
                                                                              .top_k = 6,
                                                                              .ratio = 2,
                                                                              .start = 10,
                                                                              .page_size = 4},
                                                                             seed, true));
                                    }},
                                   {"sparse_attn_v4", 1102, [](uint64_t seed) {
                                      return build_sparse_attn(golden_inputs({.v41 = false,
                                                                              .tokens = 2,
                                                                              .heads = 8,
                                                                              .window = 16,
                                                                              .n_comp = 60,
                                                                              .top_k = 16,
                                                                              .ratio = 4,
                                                                              .start = 300,
                                                                              .page_size = 8},
                                                                             seed, false));
                                    }}};
  };
  c.check = check_sparse_attn;
  c.infinite_tensors = {"sinks", "expected.lse"};
  return c;
}

}  // namespace tandem
