// Vision (DESIGN 5.3): token counts and layout for any image size, unshuffle placement and its
// inverse, RoPE invariants, the modality-biased gate, bias updates, and kernels vs reference.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <numeric>

#include "golden/vision_case.hpp"
#include "sim/vision_traffic.hpp"

namespace tandem {
namespace {

using reference::vision_geometry;

rc::Gen<int> gen_side() {
  return rc::gen::oneOf(rc::gen::inRange(1, 64), rc::gen::inRange(1, 4000),
                        rc::gen::inRange(1, 1 << 20));
}

RC_GTEST_PROP(VisionGeometry, TokenCountsAndLayoutForAnySize, ()) {
  const int w = *gen_side(), h = *gen_side();
  const auto g = vision_geometry(w, h);
  RC_ASSERT(g.tokens_w == (g.grid_w + 2) / 3 && g.tokens_h == (g.grid_h + 2) / 3);
  RC_ASSERT(g.visual_tokens() <= reference::kMaxVisualTokens);
  RC_ASSERT(g.padded_w % 14 == 0 && g.padded_h % 14 == 0);
  RC_ASSERT(g.padded_w >= g.resized_w && g.padded_w - g.resized_w < 14);
  const auto layout = reference::image_token_layout(g);
  RC_ASSERT(int64_t(layout.size()) == g.sequence_tokens());
  RC_ASSERT(g.sequence_tokens() == 2 + int64_t{g.tokens_h} * (g.tokens_w + 1));
  RC_ASSERT(std::count(layout.begin(), layout.end(), reference::kImage) == g.visual_tokens());
  RC_ASSERT(layout.front() == reference::kStart && layout.back() == reference::kEnd);
  if (g.grid_w % 3 == 0 && g.grid_h % 3 == 0) RC_ASSERT(g.patches() == 9 * g.visual_tokens());
}

TEST(VisionGeometry, SmallImagesUpscaleAndHugeOnesAreCapped) {
  const auto one = vision_geometry(1, 1);
  EXPECT_GE(int64_t{one.resized_w} * one.resized_h, 544 * 544);
  EXPECT_EQ(one.visual_tokens(), 13 * 13);  // 544 px -> 39 patches -> 13 tokens a side
  const auto huge = vision_geometry(1 << 20, 1 << 20);
  EXPECT_LE(huge.visual_tokens(), 1024);
  EXPECT_GT(huge.visual_tokens(), 900);
  EXPECT_THROW(vision_geometry(0, 5), BadInput);
}

RC_GTEST_PROP(VisionUnshuffle, IotaGridPlacesEveryElementOnceAndInverts, ()) {
  const int h = *rc::gen::inRange(1, 12), w = *rc::gen::inRange(1, 12), C = *rc::gen::inRange(1, 9);
  Tensor<float> grid({h, w, C});
  std::iota(grid.data.begin(), grid.data.end(), 1.0f);  // never zero: pads are the only zeros
  const auto want = reference::unshuffle(grid);
  std::vector<int> seen(grid.size() + 1, 0);
  for (float v : want.data) ++seen[static_cast<size_t>(v)];
  RC_ASSERT(seen[0] == int(want.size() - grid.size()));  // zeros = padding
  for (size_t v = 1; v < seen.size(); ++v) RC_ASSERT(seen[v] == 1);
  for (const auto& s : emu::test_schedules()) {
    const auto out = run_unshuffle(grid, ActDType::f32, {Backend::emu, s, 128});
    RC_ASSERT(out.tokens.data == want.data);
    RC_ASSERT(out.restored.data == grid.data);
  }
}

TEST(VisionUnshuffle, ExactlyNineTimesFewerTokensOnMultiplesOfThree) {
  Tensor<float> grid({6, 9, 2}, 1.0f);
  EXPECT_EQ(reference::unshuffle(grid).dim(0) * 9, 6 * 9);
  EXPECT_EQ(reference::unshuffle(grid).dim(1), 18);
}

RC_GTEST_PROP(VisionRope, PreservesNormsAndDependsOnlyOnOffsets, ()) {
  const int hd = 4 * *rc::gen::inRange(1, 9);
  const int r1 = *rc::gen::inRange(0, 60), c1 = *rc::gen::inRange(0, 60);
  const int dr = *rc::gen::inRange(-5, 6), dc = *rc::gen::inRange(-5, 6),
            shift = *rc::gen::inRange(0, 30);
  RopeInputs in;
  in.x = Tensor<float>({4, 1, hd});
  for (int64_t i = 0; i < in.x.size(); ++i) in.x.data[i] = std::sin(1.7 * i + 0.3) + 0.1f * (i % 5);
  // tokens 0/1 are q/k at (r1, c1) and (r1 + dr, c1 + dc); 2/3 are the same pair shifted.
  in.row = {r1, std::max(0, r1 + dr), r1 + shift, std::max(0, r1 + dr) + shift};
  in.col = {c1, std::max(0, c1 + dc), c1 + shift, std::max(0, c1 + dc) + shift};
  for (int n = 2; n < 4; ++n)
    for (int i = 0; i < hd; ++i) in.x.data[n * hd + i] = in.x.data[(n - 2) * hd + i];
  const auto y = reference::rope_2d<double>(in);
  auto dot = [&](const auto& t, int a, int b) {
    double s = 0;
    for (int i = 0; i < hd; ++i) s += double(t.data[a * hd + i]) * t.data[b * hd + i];
    return s;
  };
  for (int n = 0; n < 4; ++n)
    RC_ASSERT(std::fabs(dot(y, n, n) - dot(in.x, n, n)) <= 1e-12 * dot(in.x, n, n));
  // 1e-9: positions up to ~100 enter cos/sin as angles; double rounding of the angles.
  RC_ASSERT(std::fabs(dot(y, 0, 1) - dot(y, 2, 3)) <=
            1e-9 * std::sqrt(dot(y, 0, 0) * dot(y, 1, 1)));
}

MoeGateInputs gate_inputs(int T, int E, int k, uint64_t seed) {
  return make_gate_inputs(T, T, E, k, seed);
}

RC_GTEST_PROP(VisionGate, BiasChangesSelectionNeverTheSelectedWeights, ()) {
  auto in = gate_inputs(8, 32, 4, *rc::gen::arbitrary<uint64_t>());
  for (float& b : in.bias_text) b = *rc::gen::inRange(-200, 200) / 100.0f;
  for (float& b : in.bias_vl) b = *rc::gen::inRange(-200, 200) / 100.0f;
  const auto after = reference::moe_gate<double>(in);
  // The weights of any selected set are the unbiased scores normalised: equal to the weights
  // computed for that set without any bias.
  RC_ASSERT(after.weights.data == reference::moe_weights<double>(in, after.experts).data);
  auto unbiased = in;
  std::fill(unbiased.bias_text.begin(), unbiased.bias_text.end(), 0.0f);
  std::fill(unbiased.bias_vl.begin(), unbiased.bias_vl.end(), 0.0f);
  RC_ASSERT(reference::moe_weights<double>(unbiased, after.experts).data == after.weights.data);
}

RC_GTEST_PROP(VisionGate, EachModalityUsesOnlyItsOwnBias, ()) {
  const auto in = gate_inputs(8, 32, 4, *rc::gen::arbitrary<uint64_t>());
  auto text_changed = in, vl_changed = in;
  for (float& b : text_changed.bias_text) b += *rc::gen::inRange(-300, 300) / 100.0f;
  for (float& b : vl_changed.bias_vl) b += *rc::gen::inRange(-300, 300) / 100.0f;
  const auto base = run_moe_gate(in, {}).experts;
  const auto t = run_moe_gate(text_changed, {}).experts, v = run_moe_gate(vl_changed, {}).experts;
  const int64_t k = in.top_k;
  for (int64_t tok = 0; tok < base.dim(0); ++tok)
    for (int64_t j = 0; j < k; ++j) {
      if (in.is_image[tok])
        RC_ASSERT(t.data[tok * k + j] == base.data[tok * k + j]);
      else
        RC_ASSERT(v.data[tok * k + j] == base.data[tok * k + j]);
    }
}

TEST(VisionGate, TiesGoToTheLowerIndexOnBothBackends) {
  MoeGateInputs in;
  in.logits = Tensor<float>({2, 40}, 0.5f);  // every expert ties
  in.is_image = {0, 1};
  in.bias_text.assign(40, 0.0f);
  in.bias_vl.assign(40, 0.0f);
  in.bias_vl[33] = 1.0f;
  in.top_k = 3;
  std::vector<Backend> backends{Backend::emu};
  if (cuda_status().available) backends.push_back(Backend::cuda);
  for (Backend b : backends) {
    const auto out = run_moe_gate(in, {b, {}, 128});
    EXPECT_EQ(out.experts.data, (std::vector<int32_t>{0, 1, 2, 33, 0, 1})) << backend_name(b);
  }
  EXPECT_EQ(reference::moe_gate<double>(in).experts.data,
            (std::vector<int32_t>{0, 1, 2, 33, 0, 1}));
}

TEST(VisionGate, BiasUpdatesReduceImbalanceOnAStationaryLoad) {
  // Stationary skewed load: expert e's logit grows with e, so high experts are overloaded.
  MoeGateInputs in;
  const int T = 512, E = 32;
  in.logits = Tensor<float>({T, E});
  for (int t = 0; t < T; ++t)
    for (int e = 0; e < E; ++e)
      in.logits.data[t * E + e] = 0.08f * e + std::sin(0.37f * t * (e + 1));
  in.is_image.assign(T, 0);
  for (int t = 0; t < T; t += 2) in.is_image[t] = 1;
  in.bias_text.assign(E, 0.0f), in.bias_vl.assign(E, 0.0f);
  in.top_k = 4;
  auto imbalance = [&](bool image) {
    const auto load =
        reference::expert_load(reference::moe_gate<double>(in).experts, in.is_image, image, E);
    const double mean = std::accumulate(load.begin(), load.end(), 0.0) / E;
    return *std::max_element(load.begin(), load.end()) / mean;
  };
  const double start_text = imbalance(false), start_vl = imbalance(true);
  for (int step = 0; step < 60; ++step) {
    const auto experts = reference::moe_gate<double>(in).experts;
    reference::update_bias(in.bias_text, reference::expert_load(experts, in.is_image, false, E),
                           0.01f);
    reference::update_bias(in.bias_vl, reference::expert_load(experts, in.is_image, true, E),
                           0.01f);
  }
  EXPECT_LT(imbalance(false), 0.6 * start_text);
  EXPECT_LT(imbalance(true), 0.6 * start_vl);
  EXPECT_NE(in.bias_text, in.bias_vl);  // each modality balanced by its own bias
}

RC_GTEST_PROP(VisionEmu, KernelsMatchReference, ()) {
  VisionCase c;
  c.image_w = *rc::gen::inRange(1, 120);
  c.image_h = *rc::gen::inRange(1, 120);
  c.width = 4 * *rc::gen::inRange(1, 5);
  c.head_dim = 4 * *rc::gen::inRange(1, 9);
  c.experts = *rc::gen::inRange(8, 257);
  c.top_k = *rc::gen::inRange(1, 9);
  c.act = *rc::gen::element(ActDType::f32, ActDType::bf16);
  c.seed = *rc::gen::arbitrary<uint64_t>();
  const VisionInputs in = make_vision_inputs(c);
  const auto schedules = emu::test_schedules();
  const VisionResults out = run_vision(in, c.act, {Backend::emu, schedules[0], 128});
  for (const auto& t : compare_vision(in, out, c.act)) {
    RC_LOG() << t.name << ": " << t.result.summary();
    RC_ASSERT(t.result.pass);
  }
  const VisionResults other = run_vision(in, c.act, {Backend::emu, schedules[1], 64});
  RC_ASSERT(other.gate.experts.data == out.gate.experts.data);
  RC_ASSERT(other.gate.weights.data == out.gate.weights.data);
  RC_ASSERT(other.rope.x.data == out.rope.x.data);
  // Counted bytes equal the simulator's, launch by launch.
  LaunchLog counted = out.unshuffle.launches;
  counted.insert(counted.end(), out.rope.launches.begin(), out.rope.launches.end());
  counted.insert(counted.end(), out.gate.launches.begin(), out.gate.launches.end());
  const LaunchLog predicted =
      sim::predict_vision(in.grid.dim(0), in.grid.dim(1), c.width, in.rope.x.dim(0), c.heads,
                          c.head_dim, in.gate.logits.dim(0), c.experts, c.top_k, c.act);
  RC_ASSERT(counted.size() == predicted.size());
  for (size_t i = 0; i < counted.size(); ++i) {
    RC_LOG() << counted[i].kernel;
    RC_ASSERT(counted[i].kernel == predicted[i].kernel);
    RC_ASSERT(counted[i].read == predicted[i].read);
    RC_ASSERT(counted[i].written == predicted[i].written);
  }
}

TEST(VisionCuda, KernelsMatchReference) {
  const BackendStatus cuda = cuda_status();
  if (!cuda.available) GTEST_SKIP() << cuda.detail;
  for (auto act : {ActDType::f32, ActDType::bf16}) {
    VisionCase c;
    c.image_w = 300, c.image_h = 200, c.act = act, c.seed = 9;
    const VisionInputs in = make_vision_inputs(c);
    for (const auto& t : compare_vision(in, run_vision(in, act, {Backend::cuda, {}, 128}), act))
      EXPECT_TRUE(t.result.pass) << t.name << ": " << t.result.summary();
  }
}

TEST(VisionGate, NonFiniteLogitsAreBadInput) {
  auto in = gate_inputs(2, 16, 2, 1);
  in.logits.data[5] = NAN;
  EXPECT_THROW(run_moe_gate(in, {}), BadInput);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(VisionAligner, LinearGeluExactLinear) {
  // Identity layers expose the GELU: exact erf form, gelu(1) = 0.841344746068543, gelu(-1) =
  // -0.158655253931457 (tanh approximation: 0.841192, so it must not be used).
  const Tensor<double> x({1, 2}, {1.0, -1.0}), eye({2, 2}, {1, 0, 0, 1}), zero({2}, 0.0);
  const Tensor<double> y = reference::aligner(x, eye, zero, eye, zero);
  EXPECT_NEAR(y.data[0], 0.841344746068543, 1e-15);
  EXPECT_NEAR(y.data[1], -0.158655253931457, 1e-15);
  const Tensor<double> b2({2}, {0.5, -0.5});
  EXPECT_NEAR(reference::aligner(x, eye, zero, eye, b2).data[1], -0.658655253931457, 1e-15);
}

TEST(VisionPreprocess, LetterboxIsGrayAndPixelsAreNormalised) {
  const auto g = reference::vision_geometry(600, 600);  // no upscale; 600 -> 602 (43 patches)
  Tensor<uint8_t> rgb({600, 600, 3}, 255);
  const Tensor<float> img = reference::preprocess(rgb, g);
  EXPECT_EQ(img.dim(0), 602);
  EXPECT_FLOAT_EQ(img.data[0], 1.0f);                                  // 255 -> 1
  EXPECT_FLOAT_EQ(img.data[(601 * 602 + 601) * 3], 127 / 127.5f - 1);  // gray letterbox
  EXPECT_EQ(reference::patchify(img).dim(2), 3 * 14 * 14);
}

}  // namespace
}  // namespace tandem
