#include "golden/vision_case.hpp"

#include <cmath>

#include "core/philox.hpp"
#include "golden/case_util.hpp"
#include "reference/residual.hpp"  // store<Act>

namespace tandem {
namespace {

float round_act(float v, ActDType act) {
  return act == ActDType::bf16 ? reference::store<bf16>(v) : v;
}

}  // namespace

MoeGateInputs make_gate_inputs(int64_t image_tokens, int64_t text_tokens, int experts, int top_k,
                               uint64_t seed) {
  MoeGateInputs in;
  const int64_t T = image_tokens + text_tokens;
  in.logits = Tensor<float>({T, experts});
  for (int64_t i = 0; i < in.logits.size(); ++i)
    in.logits.data[i] = seeded_uniform(seed, 4, uint32_t(i), -4.0f, 4.0f);
  for (int64_t t = 0; t < T; ++t) in.is_image.push_back(t < image_tokens);
  for (int e = 0; e < experts; ++e) {
    in.bias_text.push_back(seeded_uniform(seed, 5, e, -0.5f, 0.5f));
    in.bias_vl.push_back(seeded_uniform(seed, 6, e, -0.5f, 0.5f));
  }
  in.top_k = top_k;
  return in;
}

VisionInputs make_vision_inputs(const VisionCase& c) {
  VisionInputs in;
  in.geometry = reference::vision_geometry(c.image_w, c.image_h, c.sizing);
  const auto& g = in.geometry;
  Tensor<uint8_t> rgb({c.image_h, c.image_w, 3});
  for (int64_t i = 0; i < rgb.size(); ++i)
    rgb.data[i] = static_cast<uint8_t>(philox_draw(c.seed, 1, uint32_t(i)).v[0]);
  const Tensor<float> patches = reference::patchify(reference::preprocess(rgb, g));
  const int64_t P = patches.dim(2), C = c.width, n = g.patches();
  Tensor<float> w({C, P});
  for (int64_t i = 0; i < C * P; ++i)
    w.data[i] = seeded_uniform(c.seed, 2, uint32_t(i), -1.0f, 1.0f) / std::sqrt(float(P));
  const Tensor<double> embedded = reference::patch_embedding(patches, w);
  in.grid = Tensor<float>({g.grid_h, g.grid_w, C});
  for (int64_t i = 0; i < in.grid.size(); ++i)
    in.grid.data[i] = round_act(float(embedded.data[i]), c.act);
  in.rope.x = Tensor<float>({n, c.heads, c.head_dim});
  for (int64_t i = 0; i < in.rope.x.size(); ++i)
    in.rope.x.data[i] = round_act(seeded_uniform(c.seed, 3, uint32_t(i), -2.0f, 2.0f), c.act);
  for (int64_t p = 0; p < n; ++p)
    in.rope.row.push_back(int32_t(p / g.grid_w)), in.rope.col.push_back(int32_t(p % g.grid_w));
  in.gate = make_gate_inputs(g.visual_tokens(), c.text_tokens, c.experts, c.top_k, c.seed);
  return in;
}

VisionResults run_vision(const VisionInputs& in, ActDType act, const RunOptions& opt) {
  return {run_unshuffle(in.grid, act, opt), run_rope_2d(in.rope, act, opt),
          run_moe_gate(in.gate, opt)};
}

std::vector<TensorCheck> compare_vision(const VisionInputs& in, const VisionResults& out,
                                        ActDType act) {
  std::vector<TensorCheck> checks;
  checks.push_back(exact_check("unshuffle", reference::unshuffle(in.grid), out.unshuffle.tokens));
  checks.push_back(exact_check("unshuffle_inverse", in.grid, out.unshuffle.restored));
  const Tensor<double> truth = reference::rope_2d<double>(in.rope);
  Tensor<double> baseline = reference::rope_2d<float>(in.rope);
  for (double& v : baseline.data) v = round_act(float(v), act);
  const OutDType dt = act == ActDType::f32 ? OutDType::F32 : OutDType::BF16;
  checks.push_back({"rope", compare_to_truth(truth.span(), baseline.span(), as_doubles(out.rope.x),
                                             dt, in.rope.x.dim(2))});
  // The experts are discrete: the float gate (the kernels' precision, same formula) selects them.
  const reference::MoeGateRef base = reference::moe_gate<float>(in.gate);
  checks.push_back(exact_check("experts", base.experts, out.gate.experts));
  const Tensor<double> truth_w = reference::moe_weights<double>(in.gate, base.experts);
  checks.push_back({"gate_weights",
                    compare_to_truth(truth_w.span(), base.weights.span(),
                                     as_doubles(out.gate.weights), OutDType::F32, in.gate.top_k)});
  return checks;
}

}  // namespace tandem
