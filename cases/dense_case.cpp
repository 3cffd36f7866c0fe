#include "cases/dense_case.hpp"

#include <fmt/format.h>

#include <cmath>

#include "cases/case_check.hpp"
#include "cases/case_util.hpp"
#include "core/json_fields.hpp"
#include "reference/dense.hpp"
#include "sim/dense_traffic.hpp"

namespace tandem {

DenseInputs make_dense_inputs(int64_t T, int64_t n_in, int64_t n_out, ActDType act, uint64_t seed,
                              bool bias, bool gelu, int groups) {
  DenseInputs in;
  in.act = act;
  in.groups = groups;
  in.x = seeded_tensor({T, n_in}, seed, 1, -2.0f, 2.0f);
  round_all_to(act, in.x.data);
  const float a = 1.0f / std::sqrt(float(n_in / groups));
  in.w = seeded_tensor({n_out, n_in / groups}, seed, 2, -a, a);
  if (bias) in.bias = seeded_tensor({n_out}, seed, 3, -1.0f, 1.0f);
  in.gelu = gelu;
  return in;
}

DenseInputs router_logits_inputs(const CheckpointLayer& l) {
  DenseInputs in;
  in.x = seeded_tensor({l.tokens, l.release.hidden}, l.seed, 1, -2.0f, 2.0f);
  in.w = l.tensors.gate.weight;
  return in;
}

namespace {

// The float baseline with each group's inputs permuted by p (the sums in another order): another
// draw of the same-precision error.
Tensor<double> permuted_baseline(const DenseInputs& in, const std::vector<int64_t>& p) {
  const int64_t T = in.x.dim(0), n_out = in.w.dim(0), k = in.w.dim(1);  // k: a group's inputs
  DenseInputs q = in;
  for (int64_t row = 0; row < T * in.groups; ++row)  // x as [T x groups, k]
    for (int64_t i = 0; i < k; ++i) q.x.data[row * k + i] = in.x.data[row * k + p[i]];
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t i = 0; i < k; ++i) q.w.data[r * k + i] = in.w.data[r * k + p[i]];
  return reference::dense_rows_baseline(q);
}

}  // namespace

DenseReference run_dense_reference(const DenseInputs& in) {
  DenseReference r{reference::dense_rows_truth(in), reference::dense_rows_baseline(in)};
  for (const auto& p : baseline_orders(in.w.dim(1), in.w.dim(0)))
    keep_farthest(r.baseline, permuted_baseline(in, p), r.truth);
  return r;
}

std::vector<TensorCheck> compare_dense(const DenseReference& ref, const DenseOutputs& out,
                                       ActDType act) {
  return compare_output("y", ref, out.y, act);
}

// ================================================================ the dense component
namespace {

BuiltCase build_dense(int64_t T, int64_t n_in, int64_t n_out, ActDType act, bool bias, bool gelu,
                      uint64_t seed, int groups = 1) {
  const DenseInputs in = make_dense_inputs(T, n_in, n_out, act, seed, bias, gelu, groups);
  BuiltCase b;
  b.config = {{"act", act_dtype_name(act)}, {"bias", bias}, {"gelu", gelu}};
  if (groups > 1) b.config["groups"] = groups;  // cases of one group name none
  for_each_tensor(in, [&](const char* name, const Tensor<float>& t) { b.blob.put(name, t); });
  b.blob.put("expected.y", run_dense_reference(in).truth);
  b.outputs = {{"y", "tolerance"}};
  return b;
}

CaseReport check_dense(const LoadedCase& c, const RunOptions& opt) {
  const JsonFields config(c.manifest.at("config"), c.name + ".json", "config");
  config.reject_unknown({"act", "bias", "gelu", "groups"});
  DenseInputs in;
  in.act = parse_act(config);
  in.gelu = config.boolean("gelu");
  in.groups = static_cast<int>(config.integer_or("groups", 1, 1, 1 << 16));
  if (config.boolean("bias")) in.bias = Tensor<float>({1});  // for_each_tensor then names it
  for_each_tensor(in, [&](const char* name, auto& t) { load_tensor(c, name, t); });
  within_work(c, "x x w", double(in.x.shape.empty() ? 0 : in.x.dim(0)) * double(in.w.size()));
  const DenseOutputs out = run_dense_rows(in, opt);  // validates the shapes first
  return check_one_output(c, "y", run_dense_reference(in), out, in.act, compare_dense);
}

// The end-to-end model's projections at its width: residual.tokens tokens of d inputs.
VerifyRow verify_dense_inputs(const DenseInputs& in, const std::string& what,
                              const RunOptions& opt) {
  const int64_t T = in.x.dim(0), d = in.x.dim(1), n_out = in.w.dim(0);
  const bool bias = !in.bias.data.empty();
  return verify_kernel_row<DenseOutputs>(
      {.component = "dense",
       .name = fmt::format(
           "{}rows/{}{} T={} {} -> {}{}", what, act_dtype_name(in.act),
           bias || in.gelu ? std::string(",") + dense_epilogue_name(bias, in.gelu) : "", T, d,
           n_out, in.groups > 1 ? fmt::format(" in {} groups", in.groups) : std::string()),
       .run = [&](const RunOptions& o) { return run_dense_rows(in, o); },
       .compare =
           [&](const DenseOutputs& out) {
             return compare_dense(run_dense_reference(in), out, in.act);
           },
       .same = [](const DenseOutputs& a, const DenseOutputs& b) { return a.y.data == b.y.data; },
       .predicted =
           [&] {
             return LaunchLog{
                 sim::predict_dense_rows(T, d, n_out, in.act, bias, in.gelu, in.groups)};
           },
       .bytes = fmt::format("{} weight rows", n_out)},
      opt);
}

VerifyRow verify_dense(const ModelConfig& model, int64_t n_out, ActDType act, bool bias, bool gelu,
                       const RunOptions& opt) {
  const int64_t T = model.residual.tokens, d = model.residual.d;
  return verify_dense_inputs(make_dense_inputs(T, d, n_out, act, model.seed, bias, gelu), "", opt);
}

// The attention's grouped output LoRA W_oa (core/attention_lora.hpp) at the model's heads:
// residual.tokens rows of heads x 512 in o_groups groups, o_lora_rank outputs each.
VerifyRow verify_grouped_dense(const ModelConfig& model, const RunOptions& opt) {
  const AttentionLora& l = model.shape.lora;
  return verify_dense_inputs(
      make_dense_inputs(model.residual.tokens, int64_t{model.shape.heads} * 512,
                        int64_t{l.o_groups} * l.o_rank, ActDType::f32, model.seed, false, false,
                        l.o_groups),
      "wo_a ", opt);
}

}  // namespace

Component dense_component() {
  Component c;
  c.name = "dense";
  c.sections = {"residual", "model"};
  // The attention block's q/k/v projection (f32, d -> 3d), the FFN-shaped epilogue path
  // (bf16, bias + GELU, d -> ffn_hidden) and the attention's grouped output LoRA.
  c.verify_rows = [](const ModelConfig& model, const RunOptions& opt) {
    const int64_t d = model.residual.d, hidden = model.shape.ffn_hidden;
    return std::vector<VerifyJob>{
        {"dense qkv",
         [=, &model, &opt] {
           return verify_dense(model, 3 * d, ActDType::f32, false, false, opt);
         }},
        {"dense bias+gelu",
         [=, &model, &opt] {
           return verify_dense(model, hidden, ActDType::bf16, true, true, opt);
         }},
        {"dense grouped", [&model, &opt] { return verify_grouped_dense(model, opt); }}};
  };
  // The router's logits with the layer's released ffn.gate.weight (BF16 values) at the
  // release's width, f32 activations.
  c.checkpoint_rows = [](const CheckpointLayer& l, const RunOptions& opt) {
    return std::vector<VerifyJob>{{"dense router logits", [&l, &opt] {
                                     return verify_dense_inputs(
                                         router_logits_inputs(l),
                                         fmt::format("layers.{}.ffn.gate ", l.tensors.layer), opt);
                                   }}};
  };
  c.golden_specs = [] {
    using A = ActDType;
    return std::vector<GoldenSpec>{
        {"dense_f32", 801,
         [](uint64_t seed) { return build_dense(5, 64, 48, A::f32, false, false, seed); }},
        {"dense_bf16_bias_gelu", 802,
         [](uint64_t seed) { return build_dense(3, 40, 24, A::bf16, true, true, seed); }},
        {"dense_f32_grouped", 803,
         [](uint64_t seed) { return build_dense(3, 256, 48, A::f32, false, false, seed, 2); }}};
  };
  c.check = check_dense;
  return c;
}

}  // namespace tandem
