#include "cases/moe_case.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "core/json_fields.hpp"
#include "core/vision_config.hpp"
#include "optimized/moe.hpp"
#include "reference/moe.hpp"
#include "sim/moe_traffic.hpp"

namespace tandem {

MoeExpertInputs make_moe_inputs(int64_t T, int64_t d, int64_t H, int64_t E, int64_t k, ActDType act,
                                uint64_t seed) {
  MoeExpertInputs in;
  in.act = act;
  in.y = seeded_tensor({T, d}, seed, 1, -2.0f, 2.0f);
  round_all_to(act, in.y.data);
  in.weights = seeded_tensor({T, k}, seed, 4, 0.1f, 1.0f);
  in.experts = Tensor<int32_t>({T, k});
  for (int64_t t = 0; t < T; ++t) {  // k distinct experts: a seeded rotation of a stride walk
    const int64_t first = philox_draw(seed, 5, uint32_t(t)).v[0] % E;
    for (int64_t j = 0; j < k; ++j) in.experts.data[t * k + j] = int32_t((first + j) % E);
  }
  std::vector<int32_t> kept(E);  // expert ids, ascending; kept[i] is materialised at i
  std::iota(kept.begin(), kept.end(), 0);
  if (!moe_materialises_every_expert(E, H, d)) {
    kept = routed_experts(in.experts);
    renumber_routing(in.experts, kept);
  }
  const int64_t M = int64_t(kept.size());
  const float a = 1.0f / std::sqrt(float(d)), b = 1.0f / std::sqrt(float(H));
  in.w_in = Tensor<float>({M, 2 * H, d});  // gate rows, then up rows
  in.w_out = Tensor<float>({M, d, H});
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < 2 * H * d; ++i) {
      const uint64_t counter = uint64_t(kept[m]) * uint64_t(2 * H * d) + uint64_t(i);
      in.w_in.data[m * 2 * H * d + i] = seeded_uniform(seed, 2, counter, -a, a);
      if (i < H * d)
        in.w_out.data[m * H * d + i] =
            seeded_uniform(seed, 3, uint64_t(kept[m]) * uint64_t(H * d) + uint64_t(i), -b, b);
    }
  return in;
}

namespace {

// The float baseline with d permuted by pd and H by ph (every sum in another order), outputs
// mapped back: another draw of the same-precision error.
Tensor<double> permuted_baseline(const MoeExpertInputs& in, const std::vector<int64_t>& pd,
                                 const std::vector<int64_t>& ph) {
  const int64_t T = in.y.dim(0), d = in.y.dim(1), E = in.w_in.dim(0), H = in.w_in.dim(1) / 2;
  MoeExpertInputs q = in;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) q.y.data[t * d + i] = in.y.data[t * d + pd[i]];
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < H; ++r)
      for (int64_t i = 0; i < d; ++i) {
        for (int64_t half : {int64_t{0}, H})  // hidden unit r's gate row and up row
          q.w_in.data[(e * 2 * H + half + r) * d + i] =
              in.w_in.data[(e * 2 * H + half + ph[r]) * d + pd[i]];
        q.w_out.data[(e * d + i) * H + r] = in.w_out.data[(e * d + pd[i]) * H + ph[r]];
      }
  const Tensor<double> f = reference::moe_experts_baseline(q);
  Tensor<double> back = f;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) back.data[t * d + pd[i]] = f.data[t * d + i];
  return back;
}

}  // namespace

MoeReference run_moe_reference(const MoeExpertInputs& in) {
  MoeReference r{reference::moe_experts_truth(in), reference::moe_experts_baseline(in)};
  const int64_t d = in.y.dim(1), H = in.w_in.dim(1) / 2;
  const auto orders_d = baseline_orders(d, d), orders_h = baseline_orders(H, d);  // row: d outputs
  for (size_t k = 0; k < orders_d.size(); ++k)
    keep_farthest(r.baseline, permuted_baseline(in, orders_d[k], orders_h[k]), r.truth);
  return r;
}

std::vector<TensorCheck> compare_moe(const MoeReference& ref, const MoeExpertOutputs& out,
                                     ActDType act) {
  return compare_output("f", ref, out.f, act);
}

// ================================================================ the moe component
namespace {

BuiltCase build_moe(int64_t T, int64_t d, int64_t H, int64_t E, int64_t k, ActDType act,
                    uint64_t seed) {
  const MoeExpertInputs in = make_moe_inputs(T, d, H, E, k, act, seed);
  BuiltCase b;
  b.config = {{"act", act_dtype_name(act)}};
  for_each_tensor(in, [&](const char* name, const auto& t) { b.blob.put(name, t); });
  b.blob.put("expected.f", run_moe_reference(in).truth);
  b.outputs = {{"f", "tolerance"}};
  return b;
}

CaseReport check_moe(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"act"});
  MoeExpertInputs in;
  in.act = parse_act(config);
  for_each_tensor(in, [&](const char* name, auto& t) { load_tensor(c, name, t); });
  within_work(c, "y x experts x w_in",
              double(in.y.shape.empty() ? 0 : in.y.dim(0)) *
                  double(in.experts.shape.size() == 2 ? in.experts.dim(1) : 0) * 1.5 *
                  double(in.w_in.size() /  // w_in [2H, d] and w_out [d, H] per expert
                         std::max<int64_t>(1, in.w_in.shape.empty() ? 1 : in.w_in.dim(0))));
  const MoeExpertOutputs out = run_moe_experts(in, opt);  // validates the shapes first
  return check_one_output(c, "f", run_moe_reference(in), out, in.act, compare_moe);
}

// The end-to-end model's FFN sublayer: residual.tokens tokens routed to vision.top_k of
// vision.experts experts of hidden width model.ffn_hidden.
VerifyRow verify_moe(const ModelConfig& model, ActDType act, const RunOptions& opt) {
  const int64_t T = model.residual.tokens, d = model.residual.d, H = model.shape.ffn_hidden;
  const int64_t E = model.vision.experts, k = model.vision.top_k;
  const MoeExpertInputs in = make_moe_inputs(T, d, H, E, k, act, model.seed);
  const int64_t materialised = in.w_in.dim(0);
  return verify_kernel_row<MoeExpertOutputs>(
      {.component = "moe",
       .name = fmt::format("experts/{} T={} d={} H={} E={}{} k={}", act_dtype_name(act), T, d, H, E,
                           materialised < E ? fmt::format(" ({} routed)", materialised) : "", k),
       .run = [&](const RunOptions& o) { return run_moe_experts(in, o); },
       .compare =
           [&](const MoeExpertOutputs& out) {
             return compare_moe(run_moe_reference(in), out, act);
           },
       .same = [](const MoeExpertOutputs& a,
                  const MoeExpertOutputs& b) { return a.f.data == b.f.data; },
       .predicted = [&] { return sim::predict_moe_experts(T, d, H, k, act); },
       .bytes = fmt::format("{} expert rows", T * k)},
      opt);
}

}  // namespace

Component moe_component() {
  Component c;
  c.name = "moe";
  c.sections = {"residual", "model", "vision"};
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    std::vector<VerifyJob> jobs;
    for (ActDType a : {ActDType::f32, ActDType::bf16})
      jobs.push_back({"moe", [=, &model, &opt] { return verify_moe(model, a, opt); }});
    return jobs;
  };
  c.golden_specs = [] {
    using A = ActDType;
    return std::vector<GoldenSpec>{
        {"moe_f32", 601, [](uint64_t seed) { return build_moe(6, 64, 128, 16, 6, A::f32, seed); }},
        {"moe_bf16", 602,
         [](uint64_t seed) { return build_moe(5, 128, 64, 8, 2, A::bf16, seed); }}};
  };
  c.check = check_moe;
  return c;
}

}  // namespace tandem
