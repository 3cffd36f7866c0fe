#include "cases/indexer_case.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "core/json_fields.hpp"
#include "reference/indexer.hpp"
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

BuiltCase build_topk(int64_t T, int64_t n, int k, int ratio, int64_t start, double ties,
                     uint64_t seed) {
  const TopkInputs in = make_topk_inputs(T, n, k, ratio, start, ties, seed);
  BuiltCase b;
  b.config = {{"top_k", k}};
  for_each_tensor(in, [&](const char* name, const auto& t) { b.blob.put(name, t); });
  b.blob.put("expected.indices", reference::topk_select(in));
  b.outputs = {{"indices", "exact"}};
  return b;
}

CaseReport check_topk(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"top_k"});
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

}  // namespace

Component indexer_component() {
  Component c;
  c.name = "indexer";
  // The selection of a V4 CSA layer (r = 4, top-512 of the entries a token sees, relu ties) and a
  // short prefix where fewer entries than k are visible (-1 padding), at the model's tokens.
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    const int64_t T = model.residual.tokens;
    const uint64_t seed = model.seed;
    return std::vector<VerifyJob>{
        {"indexer topk 512",
         [=, &opt] { return verify_topk(T, 3000, 512, 4, 9000, 0.3, seed, opt); }},
        {"indexer topk padding",
         [=, &opt] { return verify_topk(T, 64, 16, 4, 0, 0.5, seed + 1, opt); }}};
  };
  c.golden_specs = [] {
    return std::vector<GoldenSpec>{
        {"indexer_topk_ties", 1001,
         [](uint64_t seed) { return build_topk(4, 700, 64, 4, 2000, 0.4, seed); }},
        {"indexer_topk_padding", 1002,
         [](uint64_t seed) { return build_topk(6, 40, 24, 2, 10, 0.5, seed); }}};
  };
  c.check = check_topk;
  return c;
}

}  // namespace tandem
