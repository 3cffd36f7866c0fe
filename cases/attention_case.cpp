#include "cases/attention_case.hpp"

#include <fmt/format.h>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "core/json_fields.hpp"
#include "optimized/attention.hpp"
#include "reference/attention.hpp"
#include "sim/attention_traffic.hpp"

namespace tandem {

AttentionInputs make_attention_inputs(int64_t T, int64_t P, int64_t d, int heads, ActDType act,
                                      uint64_t seed) {
  AttentionInputs in;
  in.act = act;
  in.heads = heads;
  in.q = seeded_tensor({T, d}, seed, 1, -2.0f, 2.0f);
  in.keys = seeded_tensor({P + T, d}, seed, 2, -2.0f, 2.0f);
  in.values = seeded_tensor({P + T, d}, seed, 3, -2.0f, 2.0f);
  for (Tensor<float>* t : {&in.q, &in.keys, &in.values}) round_all_to(act, t->data);
  return in;
}

namespace {

// The float baseline with each head's dimension permuted by ph (every dot product in another
// order) and its sums over positions in another order, outputs mapped back: another draw of the
// same-precision error.
Tensor<double> permuted_baseline(const AttentionInputs& in, const std::vector<int64_t>& ph,
                                 reference::PositionOrder order, reference::DotOrder dot) {
  const int64_t d = in.q.dim(1), hd = d / in.heads;
  auto permute = [&](const Tensor<float>& m) {
    Tensor<float> r = m;
    for (int64_t row = 0; row < m.dim(0); ++row)
      for (int64_t c = 0; c < d; ++c)
        r.data[row * d + c] = m.data[row * d + c / hd * hd + ph[c % hd]];
    return r;
  };
  AttentionInputs q = in;
  q.q = permute(in.q), q.keys = permute(in.keys), q.values = permute(in.values);
  const Tensor<double> o = reference::attention_baseline(q, order, dot);
  Tensor<double> back = o;
  for (int64_t row = 0; row < o.dim(0); ++row)
    for (int64_t c = 0; c < d; ++c)
      back.data[row * d + c / hd * hd + ph[c % hd]] = o.data[row * d + c];
  return back;
}

}  // namespace

AttentionReference run_attention_reference(const AttentionInputs& in) {
  AttentionReference r{reference::attention_truth(in), reference::attention_baseline(in)};
  const int64_t hd = in.q.dim(1) / in.heads;
  using reference::DotOrder, reference::PositionOrder;
  // A token's row holds one independent error draw per head (a head's outputs share its softmax
  // weights, and a near one-hot softmax hangs on one or two score roundings), so the runs are
  // counted in heads. Shuffled runs alternate pairwise and sequential dot products.
  constexpr PositionOrder kPositions[] = {PositionOrder::reversed, PositionOrder::rotated,
                                          PositionOrder::given};
  const auto orders = baseline_orders(hd, in.heads);
  for (size_t k = 0; k < orders.size(); ++k)
    keep_farthest(r.baseline,
                  permuted_baseline(in, orders[k], kPositions[k % 3],
                                    k > 2 && k % 2 ? DotOrder::pairwise : DotOrder::sequential),
                  r.truth);
  // And one with pairwise dot products in the given order: few terms per score (small heads)
  // make sequential draws alone an unrepresentative sample of the same-precision error.
  keep_farthest(r.baseline,
                reference::attention_baseline(in, PositionOrder::given, DotOrder::pairwise),
                r.truth);
  return r;
}

std::vector<TensorCheck> compare_attention(const AttentionReference& ref,
                                           const AttentionOutputs& out, ActDType act) {
  return compare_output("o", ref, out.o, act);
}

// ================================================================ the attention component
namespace {

BuiltCase build_attention(int64_t T, int64_t P, int64_t d, int heads, ActDType act, uint64_t seed) {
  const AttentionInputs in = make_attention_inputs(T, P, d, heads, act, seed);
  BuiltCase b;
  b.config = {{"heads", heads}, {"act", act_dtype_name(act)}};
  for_each_tensor(in, [&](const char* name, const auto& t) { b.blob.put(name, t); });
  b.blob.put("expected.o", run_attention_reference(in).truth);
  b.outputs = {{"o", "tolerance"}};
  return b;
}

CaseReport check_attention(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"heads", "act"});
  AttentionInputs in;
  in.heads = static_cast<int>(config.integer("heads", 1, 1024));
  in.act = parse_act(config);
  for_each_tensor(in, [&](const char* name, auto& t) { load_tensor(c, name, t); });
  within_work(c, "q x keys",
              double(in.q.size()) * double(in.keys.shape.empty() ? 0 : in.keys.dim(0)) * 2);
  const AttentionOutputs out = run_attention_causal(in, opt);  // validates the shapes first
  return check_one_output(c, "o", run_attention_reference(in), out, in.act, compare_attention);
}

// The end-to-end model's attention core: residual.tokens new tokens after a cache of
// engram.tokens positions, model.heads heads over residual.d.
VerifyRow verify_attention(const ModelConfig& model, ActDType act, const RunOptions& opt) {
  const int64_t T = model.residual.tokens, P = model.engram.tokens, d = model.residual.d;
  const int heads = model.shape.heads;
  const AttentionInputs in = make_attention_inputs(T, P, d, heads, act, model.seed);
  return verify_kernel_row<AttentionOutputs>(
      {.component = "attention",
       .name =
           fmt::format("causal/{} T={} P={} d={} heads={}", act_dtype_name(act), T, P, d, heads),
       .run = [&](const RunOptions& o) { return run_attention_causal(in, o); },
       .compare =
           [&](const AttentionOutputs& out) {
             return compare_attention(run_attention_reference(in), out, act);
           },
       .same = [](const AttentionOutputs& a,
                  const AttentionOutputs& b) { return a.o.data == b.o.data; },
       .predicted = [&] { return sim::predict_attention(T, P, d, act); },
       .bytes = fmt::format("{} positions", P + T)},
      opt);
}

}  // namespace

Component attention_component() {
  Component c;
  c.name = "attention";
  c.sections = {"residual", "engram", "model"};
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    std::vector<VerifyJob> jobs;
    for (ActDType a : {ActDType::f32, ActDType::bf16})
      jobs.push_back({"attention", [=, &model, &opt] { return verify_attention(model, a, opt); }});
    return jobs;
  };
  c.golden_specs = [] {
    using A = ActDType;
    return std::vector<GoldenSpec>{
        {"attention_f32_P24", 501,
         [](uint64_t seed) { return build_attention(6, 24, 64, 2, A::f32, seed); }},
        {"attention_bf16_P0", 502,
         [](uint64_t seed) { return build_attention(9, 0, 128, 4, A::bf16, seed); }}};
  };
  c.check = check_attention;
  return c;
}

}  // namespace tandem
