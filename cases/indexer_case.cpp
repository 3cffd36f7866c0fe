#include "cases/indexer_case.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <span>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "cases/kvcache_case.hpp"  // kv_store_json, parse_kv_store, kMaxGoldenPoolBytes
#include "core/json_fields.hpp"
#include "reference/indexer.hpp"
#include "reference/kvcache.hpp"
#include "sim/indexer_traffic.hpp"

namespace tandem {

TopkInputs make_topk_inputs(int64_t T, int64_t n, int k, int ratio, int64_t start, double ties,
                            uint64_t seed) {
  TopkInputs in;
  in.top_k = k;
  in.scores = Tensor<float>({T, n});
  in.lengths = Tensor<int32_t>({T});
  for (int64_t t = 0; t < T; ++t) {
    const int64_t length = std::min<int64_t>(n, (start + t + 1) / ratio);
    in.lengths.data[size_t(t)] = int32_t(length);
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t i = uint32_t(t * n + j);
      float s;
      if (j >= length)
        s = kTopkUnread;
      else if (seeded_uniform(seed, 1, i, 0, 1) < ties)
        s = seeded_uniform(seed, 2, i, 0, 1) < 0.5f ? 0.0f : -0.0f;  // a clipped mix, either sign
      else  // a few levels, so that equal scores recur, and some spread between them
        s = std::round(seeded_uniform(seed, 3, i, -8, 8)) *
            (seeded_uniform(seed, 4, i, 0, 1) < 0.5f ? 1.0f
                                                     : seeded_uniform(seed, 5, i, 0.5f, 2.0f));
      in.scores.data[size_t(i)] = s;
    }
  }
  return in;
}

std::vector<TensorCheck> compare_topk(const TopkInputs& in, const TopkOutputs& out) {
  return {exact_check("indices", reference::topk_select(in), out.indices)};
}

CandidateCase make_candidate_case(int64_t T, int64_t n, int ratio, int64_t start, double ties,
                                  int block, int keep, int top_k, uint64_t seed) {
  const TopkInputs scorer = make_topk_inputs(T, n, 1, ratio, start, ties, seed);
  CandidateCase c;
  c.blocks = {scorer.scores, scorer.lengths, block, keep};
  c.topk = {make_topk_inputs(T, n, 1, ratio, start, ties, seed + 1).scores, scorer.lengths,
            reference::candidate_blocks(c.blocks), block, top_k};
  return c;
}

CandidateOutputs run_candidates(const CandidateCase& c, const RunOptions& opt) {
  CandidateBlocksOutputs blocks = run_candidate_blocks(c.blocks, opt);
  TopkOutputs topk = run_candidate_topk(c.topk, opt);
  CandidateOutputs out{blocks.blocks, topk.indices, std::move(blocks.launches)};
  for (LaunchCounts& l : topk.launches) out.launches.push_back(std::move(l));
  return out;
}

std::vector<TensorCheck> compare_candidates(const CandidateCase& c, const CandidateOutputs& out) {
  return {exact_check("blocks", reference::candidate_blocks(c.blocks), out.blocks),
          exact_check("indices", reference::candidate_topk(c.topk), out.indices)};
}

IndexLogitsInputs make_index_logits_inputs(KvFormat format, int64_t T, int heads, int64_t n_keys,
                                           int ratio, int64_t start, int64_t page_size,
                                           uint64_t seed) {
  const int dims = kv_format_info(format).dims();
  IndexLogitsInputs in;
  in.heads = heads, in.n_keys = n_keys, in.ratio = ratio, in.start = start;
  const int64_t pages = (n_keys + page_size - 1) / page_size;
  in.keys = kv_store_options(format, (pages + 1) * page_size, page_size, 1e-6);
  const std::vector<int64_t> order = shuffled_order(pages + 1, uint32_t(seed));
  in.page_table = Tensor<int32_t>({pages});
  for (int64_t p = 0; p < pages; ++p) in.page_table.data[size_t(p)] = int32_t(order[size_t(p)]);
  auto values = [&](int64_t rows, uint32_t id) {
    return seeded_bf16_tensor({rows, dims}, seed, id, -2.0f, 2.0f);
  };
  std::vector<int64_t> slots;
  for (int64_t j = 0; j < n_keys; ++j)
    slots.push_back(int64_t(in.page_table.data[size_t(j / page_size)]) * page_size + j % page_size);
  in.key_pool = reference::encode_pool(in.keys, values(n_keys, 1), slots);
  const KvStoreOptions q = kv_store_options(format, T * heads, T * heads, 1e-6);
  std::vector<int64_t> q_slots(size_t(T * heads));
  for (int64_t r = 0; r < T * heads; ++r) q_slots[size_t(r)] = r;
  in.q_records = reference::encode_pool(q, values(T * heads, 2), q_slots);
  in.w = seeded_tensor({T, heads}, seed, 3, -1.0f, 1.0f);
  return in;
}

namespace {

// Row t's visible scores, one row after another.
template <class T>
std::vector<double> visible_scores(const Tensor<T>& scores, const IndexLogitsInputs& in) {
  std::vector<double> v;
  for (int64_t t = 0; t < scores.dim(0); ++t)
    for (int64_t j = 0; j < visible_entries(in.start + t, in.ratio, in.n_keys); ++j)
      v.push_back(double(scores.data[size_t(t * in.n_keys + j)]));
  return v;
}

}  // namespace

std::vector<double> index_logits_truth(const IndexLogitsInputs& in) {
  return visible_scores(reference::index_logits<double>(in), in);
}

std::vector<TensorCheck> compare_index_logits(const IndexLogitsInputs& in,
                                              const IndexLogitsOutputs& out,
                                              const std::vector<double>* stored_truth) {
  const int64_t T = in.w.dim(0);
  std::vector<int64_t> lengths_of(static_cast<size_t>(T));
  Tensor<int32_t> lengths({T});
  int64_t shortest = INT64_MAX;
  for (int64_t t = 0; t < T; ++t) {
    lengths_of[size_t(t)] = visible_entries(in.start + t, in.ratio, in.n_keys);
    lengths.data[size_t(t)] = int32_t(lengths_of[size_t(t)]);
    if (lengths_of[size_t(t)] > 0) shortest = std::min(shortest, lengths_of[size_t(t)]);
  }
  const std::vector<double> truth = stored_truth ? *stored_truth : index_logits_truth(in);
  // A token's scores share its queries and weights: a row per token, each with at least
  // kMinRowErrorDraws baseline error draws (summation orders of heads and dims).
  const int64_t runs = shortest == INT64_MAX
                           ? 1
                           : std::max<int64_t>(2, (kMinRowErrorDraws + shortest - 1) / shortest);
  std::vector<double> baseline = visible_scores(reference::index_logits<float>(in), in);
  for (int order = 1; order < runs; ++order) {
    const std::vector<double> other = visible_scores(reference::index_logits<float>(in, order), in);
    for (size_t i = 0; i < truth.size() && i < other.size(); ++i)
      if (std::fabs(other[i] - truth[i]) > std::fabs(baseline[i] - truth[i]))
        baseline[i] = other[i];
  }
  std::vector<double> got;
  if (out.scores.shape == Shape{T, in.n_keys}) got = visible_scores(out.scores, in);
  TensorCheck scores{"scores", {}};
  if (got.size() != truth.size() || baseline.size() != truth.size()) {
    scores.result.pass = false;
    scores.result.failure = "wrong shape";
  } else {  // token by token; the report keeps the worst token's comparison
    size_t first = 0;
    scores.result.worst_ratio = -INFINITY;
    for (int64_t t = 0; t < T; ++t) {
      const size_t n = size_t(lengths_of[size_t(t)]);
      if (n == 0) continue;
      CompareResult r = compare_to_truth(
          std::span(truth).subspan(first, n), std::span(baseline).subspan(first, n),
          std::span(got).subspan(first, n), OutDType::F32, int64_t(n));
      if (r.worst_index >= 0) r.worst_index += int64_t(first);
      const bool pass = scores.result.pass && r.pass;
      const int64_t total = scores.result.n + r.n;
      if (r.worst_ratio > scores.result.worst_ratio || (!r.pass && scores.result.pass))
        scores.result = r;
      scores.result.pass = pass, scores.result.n = total;
      first += n;
    }
    if (scores.result.worst_ratio == -INFINITY) scores.result.worst_ratio = 0;
  }
  return {scores, exact_check("lengths", lengths, out.lengths)};
}

// ================================================================ the indexer component
namespace {

VerifyRow verify_topk(int64_t T, int64_t n, int k, int ratio, int64_t start, double ties,
                      uint64_t seed, const RunOptions& opt) {
  const TopkInputs in = make_topk_inputs(T, n, k, ratio, start, ties, seed);
  return verify_kernel_row<TopkOutputs>(
      {.component = "indexer",
       .name = fmt::format("topk T={} N={} k={} r={} pos {}.. ties {:.0f}%", T, n, k, ratio, start,
                           100 * ties),
       .run = [&](const RunOptions& o) { return run_topk_select(in, o); },
       .compare = [&](const TopkOutputs& out) { return compare_topk(in, out); },
       .same = [](const TopkOutputs& a,
                  const TopkOutputs& b) { return a.indices.data == b.indices.data; },
       .predicted = [&] { return LaunchLog{sim::predict_topk_select(in.lengths.data, k)}; },
       .bytes = "5 passes a row"},
      opt);
}

VerifyRow verify_candidates(int64_t T, int64_t n, int ratio, int64_t start, int block, int keep,
                            int k, uint64_t seed, const RunOptions& opt) {
  const CandidateCase c = make_candidate_case(T, n, ratio, start, 0.3, block, keep, k, seed);
  return verify_kernel_row<CandidateOutputs>(
      {.component = "indexer",
       .name = fmt::format("candidates T={} N={} r={} pos {}.. blocks of {}, keep {}, top-{}", T, n,
                           ratio, start, block, keep, k),
       .run = [&](const RunOptions& o) { return run_candidates(c, o); },
       .compare = [&](const CandidateOutputs& out) { return compare_candidates(c, out); },
       .same =
           [](const CandidateOutputs& a, const CandidateOutputs& b) {
             return a.blocks.data == b.blocks.data && a.indices.data == b.indices.data;
           },
       .predicted =
           [&] {
             return LaunchLog{sim::predict_candidate_blocks(c.blocks.lengths.data, block, keep),
                              sim::predict_candidate_topk(c.topk)};
           },
       .bytes = "5 passes a row"},
      opt);
}

VerifyRow verify_index_logits(KvFormat f, int64_t T, int heads, int64_t n, int ratio, int64_t start,
                              uint64_t seed, const RunOptions& opt) {
  IndexLogitsInputs in = make_index_logits_inputs(f, T, heads, n, ratio, start, 16, seed);
  in.weight_scale = release_index_weight_scale(heads);
  return verify_kernel_row<IndexLogitsOutputs>(
      {.component = "indexer",
       .name = fmt::format("logits/{} T={} H={} keys={} r={} pos {}..", kv_format_name(f), T, heads,
                           n, ratio, start),
       .run = [&](const RunOptions& o) { return run_index_logits(in, o); },
       .compare = [&](const IndexLogitsOutputs& out) { return compare_index_logits(in, out); },
       .same =
           [&](const IndexLogitsOutputs& a, const IndexLogitsOutputs& b) {
             return compare_exact<float>(a.scores.span(), b.scores.span()).pass &&
                    a.lengths.data == b.lengths.data;
           },
       .predicted =
           [&] { return LaunchLog{sim::predict_index_logits(f, T, heads, n, ratio, start)}; },
       .bytes = "each key once a token"},
      opt);
}

BuiltCase build_index_logits(KvFormat f, int64_t T, int heads, int64_t n, int ratio, int64_t start,
                             uint64_t seed) {
  const IndexLogitsInputs in = make_index_logits_inputs(f, T, heads, n, ratio, start, 8, seed);
  BuiltCase b;
  b.config = {{"kind", "logits"}, {"keys", kv_store_json(in.keys)},
              {"n_keys", n},      {"ratio", ratio},
              {"start", start},   {"heads", heads}};
  if (in.weight_scale != 1.0f) b.config["weight_scale"] = in.weight_scale;
  for_each_tensor(in, [&](const char* name, const auto& t) { b.blob.put(name, t); });
  const std::vector<double> truth = index_logits_truth(in);
  b.blob.put("expected.scores", Tensor<double>({int64_t(truth.size())}, truth));
  b.outputs = {{"scores", "tolerance"}, {"lengths", "exact"}};
  return b;
}

CaseReport check_index_logits(const LoadedCase& c, const JsonFields& config,
                              const RunOptions& opt) {
  config.reject_unknown({"kind", "keys", "n_keys", "ratio", "start", "heads", "weight_scale"});
  IndexLogitsInputs in;
  in.keys = parse_kv_store(config.object("keys"));
  in.n_keys = config.integer("n_keys", 0, int64_t{1} << 30);
  in.ratio = int(config.integer("ratio", 1, 1024));
  in.start = config.integer("start", 0, int64_t{1} << 40);
  in.heads = int(config.integer("heads", 1, kIndexMaxHeads));
  in.weight_scale = float(config.number_or("weight_scale", 1.0, 0x1p-20, 0x1p20));
  if (kv_pool_bytes(in.keys) > kMaxGoldenPoolBytes)
    throw_bad_input("{}: a pool over 64 MiB (golden cases are small)", config.where("keys"));
  for_each_tensor(in, [&](const char* name, auto& t) { load_tensor(c, name, t); });
  within_work(c, "w x n_keys x 128", double(in.w.size()) * double(in.n_keys) * 128);
  const IndexLogitsOutputs out = run_index_logits(in, opt);  // validates the blob first
  const std::vector<double> now = index_logits_truth(in);
  CaseReport report{c.name, {}};
  report.tensors.push_back(reference_check("scores", {{int64_t(now.size())}, now},
                                           c.blob.get("expected.scores", c.blob_source)));
  const std::vector<double> stored = c.blob.get_as<double>("expected.scores", c.blob_source).data;
  add_checks(report, compare_index_logits(in, out, &stored), c.outputs);
  return report;
}

BuiltCase build_topk(int64_t T, int64_t n, int k, int ratio, int64_t start, double ties,
                     uint64_t seed) {
  const TopkInputs in = make_topk_inputs(T, n, k, ratio, start, ties, seed);
  BuiltCase b;
  b.config = {{"kind", "topk"}, {"top_k", k}};
  for_each_tensor(in, [&](const char* name, const auto& t) { b.blob.put(name, t); });
  b.blob.put("expected.indices", reference::topk_select(in));
  b.outputs = {{"indices", "exact"}};
  return b;
}

CaseReport check_topk(const LoadedCase& c, const JsonFields& config, const RunOptions& opt) {
  config.reject_unknown({"kind", "top_k"});
  TopkInputs in;
  in.top_k = int(config.integer("top_k", 1, kTopkMax));
  for_each_tensor(in, [&](const char* name, auto& t) { load_tensor(c, name, t); });
  const TopkOutputs out = run_topk_select(in, opt);  // validates the scores first
  const Tensor<int32_t> expected =
      get_shaped<int32_t>(c, "expected.indices", {in.scores.dim(0), int64_t(in.top_k)});
  return {c.name,
          {exact_output("indices", "reference", expected, reference::topk_select(in)),
           exact_output("indices", "kernel", expected, out.indices)}};
}

// V4.1's candidates: the scorer's rows through for_each_tensor (scores, lengths) and the later
// layer's own scores (later.scores); expected: the reference's blocks and selection inside them.
BuiltCase build_candidates(int64_t T, int64_t n, int ratio, int64_t start, int block, int keep,
                           int k, uint64_t seed) {
  const CandidateCase c = make_candidate_case(T, n, ratio, start, 0.3, block, keep, k, seed);
  BuiltCase b;
  b.config = {{"kind", "candidates"}, {"block", block}, {"keep", keep}, {"top_k", k}};
  for_each_tensor(c.blocks, [&](const char* name, const auto& t) { b.blob.put(name, t); });
  b.blob.put("later.scores", c.topk.scores);
  b.blob.put("expected.blocks", c.topk.blocks);
  b.blob.put("expected.indices", reference::candidate_topk(c.topk));
  b.outputs = {{"blocks", "exact"}, {"indices", "exact"}};
  return b;
}

CaseReport check_candidates(const LoadedCase& c, const JsonFields& config, const RunOptions& opt) {
  config.reject_unknown({"kind", "block", "keep", "top_k"});
  CandidateCase in;
  in.blocks.block = int(config.integer("block", 1, 1024));
  in.blocks.keep = int(config.integer("keep", 1, kTopkMax));
  for_each_tensor(in.blocks, [&](const char* name, auto& t) { load_tensor(c, name, t); });
  const CandidateBlocksOutputs blocks = run_candidate_blocks(in.blocks, opt);  // validates first
  const int64_t T = in.blocks.scores.dim(0);
  const Tensor<int32_t> want_blocks =
      get_shaped<int32_t>(c, "expected.blocks", {T, int64_t(in.blocks.keep)});
  in.topk = {get_shaped<float>(c, "later.scores", in.blocks.scores.shape), in.blocks.lengths,
             want_blocks, in.blocks.block, int(config.integer("top_k", 1, kTopkMax))};
  const TopkOutputs selected = run_candidate_topk(in.topk, opt);  // validates the stored blocks
  const Tensor<int32_t> want =
      get_shaped<int32_t>(c, "expected.indices", {T, int64_t(in.topk.top_k)});
  return {c.name,
          {exact_output("blocks", "reference", want_blocks, reference::candidate_blocks(in.blocks)),
           exact_output("blocks", "kernel", want_blocks, blocks.blocks),
           exact_output("indices", "reference", want, reference::candidate_topk(in.topk)),
           exact_output("indices", "kernel", want, selected.indices)}};
}

}  // namespace

Component indexer_component() {
  Component c;
  c.name = "indexer";
  c.sections = {"residual", "model"};
  // Index scores over paged MXFP4 (r = 4) and FP8 (r = 2) keys; the selection of a V4 CSA layer
  // (top-512 of the entries a token sees, relu ties), a short prefix where fewer entries than k
  // are visible (-1 padding), and V4.1's candidates (r = 1: 64 of ~363 blocks of 8 kept, a later
  // layer's top-128 inside them); at the model's tokens. Then the config's indexer (V4.1-Flash's:
  // 32 index heads, top-512) over an r = 2 cache of four times the top-k keys, and its top-k
  // inside V4.1's candidates at the release's size (2048 blocks of 8 kept of 4608 and the tokens'
  // own: 36,864 positions before them, r = 1).
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    const int64_t T = model.residual.tokens;
    const uint64_t seed = model.seed;
    const int heads = model.shape.index_heads, k = model.shape.index_topk;
    const int64_t keys = 4 * int64_t(k);
    return std::vector<VerifyJob>{
        {"indexer logits model",
         [=, &opt] {
           return verify_index_logits(KvFormat::idx_mxfp4, T, heads, keys, 2, 2 * keys, seed + 3,
                                      opt);
         }},
        {"indexer topk model",
         [=, &opt] { return verify_topk(T, keys, k, 2, 2 * keys, 0.3, seed + 4, opt); }},
        {"indexer logits v4",
         [=, &opt] {
           return verify_index_logits(KvFormat::idx_mxfp4, T, 8, 300, 4, 1190, seed, opt);
         },
         RowSizes::fixed},
        {"indexer logits fp8",
         [=, &opt] {
           return verify_index_logits(KvFormat::idx_fp8, T, 8, 300, 2, 590, seed + 2, opt);
         },
         RowSizes::fixed},
        {"indexer topk 512",
         [=, &opt] { return verify_topk(T, 3000, 512, 4, 9000, 0.3, seed, opt); }, RowSizes::fixed},
        {"indexer topk padding",
         [=, &opt] { return verify_topk(T, 64, 16, 4, 0, 0.5, seed + 1, opt); }, RowSizes::fixed},
        {"indexer candidates",
         [=, &opt] { return verify_candidates(T, 3000, 1, 2900, 8, 64, 128, seed, opt); },
         RowSizes::fixed},
        {"indexer candidates model", [=, &opt] {
           return verify_candidates(T, kCandidateRowPositions + T, 1, kCandidateRowPositions,
                                    kV41CandidateBlock, kV41CandidateKeep, k, seed + 5, opt);
         }}};
  };
  c.golden_specs = [] {
    return std::vector<GoldenSpec>{
        {"indexer_logits_mxfp4", 1003,
         [](uint64_t seed) {
           return build_index_logits(KvFormat::idx_mxfp4, 3, 6, 70, 4, 250, seed);
         }},
        {"indexer_logits_fp8", 1004,
         [](uint64_t seed) {
           return build_index_logits(KvFormat::idx_fp8, 2, 3, 30, 2, 40, seed);
         }},
        {"indexer_topk_ties", 1001,
         [](uint64_t seed) { return build_topk(4, 700, 64, 4, 2000, 0.4, seed); }},
        {"indexer_topk_padding", 1002,
         [](uint64_t seed) { return build_topk(6, 40, 24, 2, 10, 0.5, seed); }},
        {"indexer_candidates", 1005,
         [](uint64_t seed) { return build_candidates(3, 500, 1, 480, 8, 16, 24, seed); }}};
  };
  c.check = [](const LoadedCase& c, const RunOptions& opt) {
    const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
    const std::string kind = config.string("kind");
    if (kind == "logits") return check_index_logits(c, config, opt);
    if (kind == "topk") return check_topk(c, config, opt);
    if (kind == "candidates") return check_candidates(c, config, opt);
    throw_bad_input("{}: expected logits, topk or candidates, got '{}'", config.where("kind"),
                    kind);
  };
  return c;
}

}  // namespace tandem
