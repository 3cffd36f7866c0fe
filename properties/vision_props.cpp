// Vision (DESIGN 5.3): token counts and layout for any image size, unshuffle placement and its
// inverse, RoPE invariants, the modality-biased gate, bias updates, and kernels vs reference.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>

#include "bad_input.hpp"
#include "cases/vision_case.hpp"
#include "core/dtype.hpp"
#include "core/philox.hpp"
#include "golden_edit.hpp"
#include "sim/vision_traffic.hpp"
#include "test_dir.hpp"

namespace tandem {
namespace {

using reference::vision_geometry;
constexpr ImageSizing kRelease;  // min_pixels 544^2, max_tokens 1024, no max_wh_ratio

rc::Gen<int> gen_side() {
  return rc::gen::oneOf(rc::gen::inRange(1, 64), rc::gen::inRange(1, 4001),
                        rc::gen::element(1, 100000, 1 << 20));
}

float bf16_round(float v) { return bf16_decode(bf16_encode(v)); }
float normalised(double pixel) { return bf16_round(float((pixel / 255 - 0.5) / 0.5)); }

// DESIGN 5.3's closed form for a sized image, as the property below restates it.
struct ClosedForm {
  double wmax, hmax;
};
ClosedForm closed_form(const reference::VisionGeometry& g, int max_tokens) {
  const double r = double(g.sized_h) / g.sized_w;
  const double wmax = std::sqrt((max_tokens - 2) / r + 0.25) - 0.5;
  return {wmax, wmax * r};
}

// For any size: a small image is upscaled and truncated (its area at most min_pixels, at most
// one pixel short a side: 109 x 109 becomes 543 x 543, as 109 x (544/109) rounds below 544), a
// larger one kept; the span fits the budget; the canvas is whole patches and gives the grid; an
// image whose whole-patch size fits is not shrunk (canvas = the sized image rounded up to 14); a
// shrunk one is a single column or row when the closed form's wmax or hmax is below one cell,
// else its token grid stays within floor(wmax) x floor(hmax) cells, one side fills its cells to
// within one patch (so no larger canvas of that aspect fits the closed form's cells), and the
// aspect of the sized image is kept to within one patch (a whole one where side x beta rounds
// just below a multiple of 14, as 1104 x 1748 loses a patch column). All of this holds for every
// size up to 3000 x 3000 and for sides 1..2^20 against 1, 2, 3, 7, 100, 1000, 100000 and 2^20.
RC_GTEST_PROP(VisionGeometry, ReleasedSizingForAnySize, ()) {
  const int w = *gen_side(), h = *gen_side();
  const auto g = vision_geometry(w, h, kRelease);
  const int64_t sized = int64_t{g.sized_w} * g.sized_h, area = int64_t{w} * h;
  if (area < kRelease.min_pixels)
    RC_ASSERT(sized <= kRelease.min_pixels &&
              (g.sized_w + 1) * int64_t{g.sized_h + 1} >= kRelease.min_pixels);
  else
    RC_ASSERT(g.sized_w == w && g.sized_h == h);
  RC_ASSERT(g.sequence_tokens() <= kRelease.max_tokens);
  RC_ASSERT(g.canvas_w % 14 == 0 && g.canvas_h % 14 == 0);
  RC_ASSERT(g.grid_w == g.canvas_w / 14 && g.grid_h == g.canvas_h / 14);
  RC_ASSERT(g.tokens_w == (g.grid_w + 2) / 3 && g.tokens_h == (g.grid_h + 2) / 3);
  const int64_t whole_w = (g.sized_w + 13) / 14, whole_h = (g.sized_h + 13) / 14;
  if (reference::VisionGeometry::span_tokens((whole_w + 2) / 3, (whole_h + 2) / 3) <=
      kRelease.max_tokens) {
    RC_ASSERT(g.canvas_w == 14 * whole_w && g.canvas_h == 14 * whole_h);
    return;
  }
  const auto [wmax, hmax] = closed_form(g, kRelease.max_tokens);
  if (wmax < 1) {
    RC_ASSERT(g.canvas_w == 42 && g.canvas_h == (kRelease.max_tokens - 2) / 2 * 42);
  } else if (hmax < 1) {
    RC_ASSERT(g.canvas_w == (kRelease.max_tokens - 3) * 42 && g.canvas_h == 42);
  } else {
    const int64_t cells_w = int64_t(std::floor(wmax)), cells_h = int64_t(std::floor(hmax));
    RC_ASSERT(g.tokens_w <= cells_w && g.tokens_h <= cells_h);
    RC_ASSERT(g.canvas_w >= 42 * cells_w - 14 || g.canvas_h >= 42 * cells_h - 14);
    const int64_t skew = int64_t{g.canvas_w} * g.sized_h - int64_t{g.canvas_h} * g.sized_w;
    RC_ASSERT(std::abs(skew) <= 14 * int64_t{std::max(g.sized_w, g.sized_h)});
  }
}

RC_GTEST_PROP(VisionGeometry, LayoutMatchesTheGrid, ()) {
  const auto g = vision_geometry(*gen_side(), *gen_side(), kRelease);
  const auto layout = reference::image_token_layout(g);
  RC_ASSERT(int64_t(layout.size()) == g.sequence_tokens());
  RC_ASSERT(g.sequence_tokens() == 2 + int64_t{g.tokens_h} * (g.tokens_w + 1));
  RC_ASSERT(std::count(layout.begin(), layout.end(), reference::kImage) == g.visual_tokens());
  RC_ASSERT(layout.front() == reference::kStart && layout.back() == reference::kEnd);
  if (g.grid_w % 3 == 0 && g.grid_h % 3 == 0) RC_ASSERT(g.patches() == 9 * g.visual_tokens());
}

// Worked from DESIGN 5.3's steps (the old rules gave 1920x1080 a 24x42 grid, 1034 positions).
TEST(VisionGeometry, ReleasedExamples) {
  const auto hd = vision_geometry(1920, 1080, kRelease);  // no upscale; 1932x1092 is over budget
  EXPECT_EQ(hd.tokens_h, 23);
  EXPECT_EQ(hd.tokens_w, 41);
  EXPECT_EQ(hd.sequence_tokens(), 968);
  EXPECT_EQ(hd.canvas_w, 1708);  // beta = 23 x 42 / 1080: 1920 beta = 1708.44, 1080 beta = 966
  EXPECT_EQ(hd.canvas_h, 966);
  const auto one = vision_geometry(1, 1, kRelease);  // 544 x 544 -> 546 px, 13 tokens a side
  EXPECT_EQ(one.sized_w, 544);
  EXPECT_EQ(one.visual_tokens(), 13 * 13);
  const auto vga = vision_geometry(640, 480, kRelease);  // over 544^2: 644 x 490 px, 46 x 35
  EXPECT_EQ(vga.tokens_h, 12);
  EXPECT_EQ(vga.tokens_w, 16);
  EXPECT_THROW(vision_geometry(0, 5, kRelease), BadInput);
  EXPECT_THROW(vision_geometry(5, (1 << 20) + 1, kRelease), BadInput);
}

TEST(VisionGeometry, ExtremeAspectsBecomeOneColumnOrOneRow) {
  const auto tall = vision_geometry(1, 100000, kRelease);
  EXPECT_EQ(tall.canvas_w, 42);
  EXPECT_EQ(tall.canvas_h, 511 * 42);  // (1024 - 2) // 2 rows of IMAGE + NEWLINE
  EXPECT_EQ(tall.sequence_tokens(), 1024);
  const auto wide = vision_geometry(100000, 1, kRelease);
  EXPECT_EQ(wide.canvas_w, 1021 * 42);  // 1024 - 3 IMAGEs, one NEWLINE, START, END
  EXPECT_EQ(wide.canvas_h, 42);
  EXPECT_EQ(wide.sequence_tokens(), 1024);
  // The image keeps its aspect inside: 100000 x 1 fits 42882 px wide as 0.43 -> 0 px tall, which
  // the release's PIL refuses to resize to.
  EXPECT_EQ(wide.content_h, 0);
  expect_bad_input(
      [] {
        reference::preprocess(Tensor<uint8_t>({1, 100000, 3}, 9),
                              vision_geometry(100000, 1, kRelease));
      },
      "rounds to 0 px");
  ImageSizing small = kRelease;
  small.max_tokens = 4;  // the least budget: one IMAGE either way
  EXPECT_EQ(vision_geometry(3000, 10, small).sequence_tokens(), 4);
  EXPECT_EQ(vision_geometry(10, 3000, small).sequence_tokens(), 4);
}

TEST(VisionGeometry, UpscaleTruncatesLikeTheRelease) {
  // 1 x 41 px: sqrt(544^2 / 41) = 84.96, so 84 x 3483 px (int() truncates): 6 patches, 2 tokens
  // wide. Rounding up (85 px) would take 7 patches, 3 tokens.
  const auto g = vision_geometry(1, 41, kRelease);
  EXPECT_EQ(g.sized_w, 84);
  EXPECT_EQ(g.sized_h, 3483);
  EXPECT_EQ(g.tokens_w, 2);
  EXPECT_EQ(g.tokens_h, 83);
  // In double 109 x (544 / 109) is 543.99999999999989: int() gives 543, as in the release.
  EXPECT_EQ(vision_geometry(109, 109, kRelease).sized_w, 543);
  ImageSizing none = kRelease;
  none.min_pixels = 0;  // no upscale: 1 x 41 px is one patch wide, 3 tall, one token
  EXPECT_EQ(vision_geometry(1, 41, none).visual_tokens(), 1);
}

TEST(VisionGeometry, MaxWhRatioClampsTheWidth) {
  ImageSizing s = kRelease;
  s.min_pixels = 0, s.max_wh_ratio = 2.5;
  const auto g = vision_geometry(1000, 101, s);  // 101 x 2.5 = 252.5 -> int() 252
  EXPECT_EQ(g.sized_w, 252);
  EXPECT_EQ(g.sized_h, 101);
  EXPECT_EQ(g.canvas_w, 252);
  EXPECT_EQ(g.canvas_h, 112);
  // The pixels still keep the image's own aspect inside that canvas (DESIGN 5.3 (5)).
  EXPECT_EQ(g.content_w, 252);
  EXPECT_EQ(g.content_h, 25);                            // round(101 / 1000 x 252) = round(25.45)
  EXPECT_EQ(vision_geometry(250, 101, s).sized_w, 250);  // within the ratio: unchanged
  s.min_pixels = kRelease.min_pixels;                    // clamped first, then upscaled
  const auto up = vision_geometry(1000, 100, s);         // 250 x 100 -> x sqrt(11.84): 860 x 344
  EXPECT_EQ(up.sized_w, 860);
  EXPECT_EQ(up.sized_h, 344);
}

// A geometry's canvas and where the image lies in it: canvas w, h, content x, w, y, h.
std::array<int, 6> placement(const VisionGeometry& g) {
  return {g.canvas_w, g.canvas_h, g.content_x, g.content_w, g.content_y, g.content_h};
}

TEST(VisionPreprocess, ContentIsCentredInGray) {
  // 100 x 40 px: upscaled to 860 x 344, canvas 868 x 350; the image fits 868 px wide as
  // round(347.2) = 347 rows, at y = round(1.5) = 2 (half to even): rows [2, 349).
  const auto g = vision_geometry(100, 40, kRelease);
  ASSERT_EQ(placement(g), (std::array{868, 350, 0, 868, 2, 347}));
  const Tensor<float> img = reference::preprocess(Tensor<uint8_t>({40, 100, 3}, 200), g);
  for (int64_t y = 0; y < 350; ++y)
    for (int64_t x = 0; x < 868; ++x)
      for (int c = 0; c < 3; ++c)
        ASSERT_EQ(img.data[(y * 868 + x) * 3 + c], normalised(y >= 2 && y < 349 ? 200 : 127))
            << y << "," << x;
  EXPECT_EQ(reference::patchify(img).dim(2), 3 * 14 * 14);
  // Transposed, 40 x 100 px: canvas 350 x 868, 347 columns at x = round(1.5) = 2.
  EXPECT_EQ(placement(vision_geometry(40, 100, kRelease)), (std::array{350, 868, 2, 347, 0, 868}));
}

// A constant image stays exactly constant through any resize: each output is its first tap
// plus weighted differences, which are all zero (gray through preprocess included).
RC_GTEST_PROP(VisionResample, ConstantStaysConstant, ()) {
  const int iw = *rc::gen::inRange(1, 90), ih = *rc::gen::inRange(1, 90);
  const int w = *rc::gen::inRange(1, 200), h = *rc::gen::inRange(1, 200);
  const uint8_t v = *rc::gen::arbitrary<uint8_t>();
  const Tensor<double> out = reference::resize_bicubic(Tensor<uint8_t>({ih, iw, 3}, v), w, h);
  for (double x : out.data) RC_ASSERT(x == double(v));
}

RC_GTEST_PROP(VisionResample, SameSizeReturnsThePixels, ()) {
  const int w = *rc::gen::inRange(1, 60), h = *rc::gen::inRange(1, 60);
  Tensor<uint8_t> rgb({h, w, 3});
  for (auto& p : rgb.data) p = *rc::gen::arbitrary<uint8_t>();
  const Tensor<double> out = reference::resize_bicubic(rgb, w, h);
  for (size_t i = 0; i < out.data.size(); ++i) RC_ASSERT(out.data[i] == double(rgb.data[i]));
}

// A horizontal ramp p(x) = 2x at output pixels whose taps all lie inside the image: when
// enlarging, Keys' kernel reproduces linear functions, to double rounding (1e-9 levels: a few
// taps of <= 255); when shrinking, the stretched kernel is sampled off its knots and its
// weights' centroid sits up to 0.0208 output px from the centre (the most seen over every pair
// of sizes up to 600 px), so 2 x 0.025 x scale levels.
RC_GTEST_PROP(VisionResample, RampIsReproducedInside, ()) {
  const int iw = *rc::gen::inRange(8, 128), w = *rc::gen::inRange(1, 300);
  Tensor<uint8_t> rgb({2, iw, 3});
  for (int64_t x = 0; x < iw; ++x)
    for (int64_t y = 0; y < 2; ++y)
      for (int c = 0; c < 3; ++c) rgb.data[(y * iw + x) * 3 + c] = uint8_t(2 * x);
  const Tensor<double> out = reference::resize_bicubic(rgb, w, 2);
  const double scale = double(iw) / w, support = 2 * std::max(scale, 1.0);
  const double bound = scale <= 1 ? 1e-9 : 2 * 0.025 * scale;
  for (int64_t i = 0; i < w; ++i) {
    const double centre = (i + 0.5) * scale;
    if (centre - support + 0.5 < 0 || centre + support + 0.5 > iw) continue;
    RC_ASSERT(std::abs(out.data[i * 3] - 2 * (centre - 0.5)) <= bound);
  }
}

// The weights sum to 1 (to double rounding) and their magnitudes to at most 1.27 (1.2688 the
// most seen): the README's bound against PIL's per-pass rounding rests on it.
RC_GTEST_PROP(VisionResample, KeysWeightsSumToOne, ()) {
  const int in = *rc::gen::inRange(1, 3000), out = *rc::gen::inRange(1, 3000);
  for (const auto& t : reference::bicubic_taps(in, out)) {
    RC_ASSERT(t.first >= 0 && t.first + int64_t(t.weights.size()) <= in);
    double sum = 0, magnitude = 0;
    for (double w : t.weights) sum += w, magnitude += std::abs(w);
    RC_ASSERT(std::abs(sum - 1) < 1e-12);
    RC_ASSERT(magnitude <= 1.27);
  }
}

TEST(VisionResample, KeysKernelValues) {
  EXPECT_EQ(reference::keys_cubic(0), 1);
  EXPECT_EQ(reference::keys_cubic(0.5), 0.5625);
  EXPECT_EQ(reference::keys_cubic(-1), 0);
  EXPECT_EQ(reference::keys_cubic(1.5), -0.0625);
  EXPECT_EQ(reference::keys_cubic(2), 0);
  EXPECT_EQ(reference::keys_cubic(-3), 0);
}

// Every preprocessed value is a bf16 (the release casts the pixels to bf16), gray outside.
// Smaller upscale targets than the release's 544^2 keep a case cheap; the rounding is the same.
RC_GTEST_PROP(VisionPreprocess, PixelsAreBf16, ()) {
  const int w = *rc::gen::inRange(1, 80), h = *rc::gen::inRange(1, 80);
  ImageSizing sizing = kRelease;
  sizing.min_pixels = *rc::gen::element<int64_t>(0, 96 * 96, 544 * 544 / 16);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  Tensor<uint8_t> rgb({h, w, 3});
  for (size_t i = 0; i < rgb.data.size(); ++i)
    rgb.data[i] = uint8_t(philox_draw(seed, 7, uint32_t(i)).v[0]);
  const auto g = vision_geometry(w, h, sizing);
  const Tensor<float> img = reference::preprocess(rgb, g);
  RC_ASSERT(img.dim(0) == g.canvas_h && img.dim(1) == g.canvas_w);
  for (float v : img.data) RC_ASSERT(v == bf16_round(v) && v >= -1 && v <= 1);
  if (g.content_y > 0) RC_ASSERT(img.data[0] == normalised(127));
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
  return make_gate_inputs(T, T, E, k, 0, seed);
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

// Biased scores may all be negative (a bias below -sqrt(softplus(logit))): the lanes past the
// last expert must still rank below every real one, never be chosen as experts E, E + 1, ...
TEST(VisionGate, OnlyRealExpertsAreChosenWhenEveryBiasedScoreIsNegative) {
  for (const int E : {8, 40}) {
    MoeGateInputs in;
    in.logits = Tensor<float>({2, E}, 0.0f);  // s = sqrt(softplus(0)) = 0.83
    in.is_image = {0, 1};
    in.bias_text.assign(size_t(E), -1.0f);
    in.bias_vl.assign(size_t(E), -1.0f);
    in.bias_text[7] = in.bias_vl[5] = -0.9f;
    in.top_k = 3;
    const std::vector<int32_t> want{7, 0, 1, 5, 0, 1};
    EXPECT_EQ(reference::moe_gate<double>(in).experts.data, want) << E << " experts";
    std::vector<Backend> backends{Backend::emu};
    if (cuda_status().available) backends.push_back(Backend::cuda);
    for (Backend b : backends)
      EXPECT_EQ(run_moe_gate(in, {b, {}, 128}).experts.data, want)
          << backend_name(b) << ", " << E << " experts";
  }
}

// Scores at the ends of softplus: logits far below 0 (softplus = log1p(e^x) ~ e^x, which
// log(1 + e^x) in float rounds to 0 below -17) and past the x > 20 switch. The kernel selects as
// the float reference and weighs within the policy's budget, on every backend.
RC_GTEST_PROP(VisionGate, ScoresOfExtremeLogitsMatchTheReference, ()) {
  auto in = gate_inputs(8, 64, 6, *rc::gen::arbitrary<uint64_t>());
  // Even tokens: every logit in [-26, -8), so the chosen weights are ratios of tiny scores; odd
  // tokens: one logit in five in [20, 40), the rest negative.
  const int64_t E = in.logits.dim(1);
  for (int64_t i = 0; i < in.logits.size(); ++i) {
    const float u = seeded_uniform(uint64_t(i), 9, 0, 0.0f, 1.0f);
    const bool large = (i / E) % 2 == 1 && i % 5 == 0;
    in.logits.data[size_t(i)] = large ? 20.0f + 20.0f * u : -26.0f + 18.0f * u;
  }
  std::vector<Backend> backends{Backend::emu};
  if (cuda_status().available) backends.push_back(Backend::cuda);
  for (Backend b : backends)
    for (const TensorCheck& t : compare_gate(in, run_moe_gate(in, {b, {}, 128}))) {
      RC_LOG() << backend_name(b) << " " << t.name << ": " << t.result.summary();
      RC_ASSERT(t.result.pass);
    }
}

// An image whose resize rounds a side to 0 px is bad input: a config holding it is refused when
// read, naming the file and fields (nothing runs first), and the preprocessing refuses it too.
TEST(VisionEmu, AnImageThatResizesToNothingIsRefused) {
  VisionCase c;
  c.image_w = 1 << 20, c.image_h = 1;
  nlohmann::json j = to_json(builtin_model("tiny"));
  j["vision"]["image_w"] = c.image_w, j["vision"]["image_h"] = c.image_h;
  for (const std::vector<std::string>& sections :
       std::vector<std::vector<std::string>>{{"vision"}, kModelSections}) {
    try {
      parse_model_config(j, "cfg.json", sections);
      ADD_FAILURE() << "a config's 2^20 x 1 px image was accepted";
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "cfg.json: field 'vision.image_w' x 'image_h' (1048576x1): image"),
                std::string::npos)
          << e.what();
    }
  }
  try {
    make_vision_inputs(c);
    ADD_FAILURE() << "a 2^20 x 1 px image was preprocessed";
  } catch (const BadInput& e) {
    EXPECT_NE(std::string(e.what()).find("a side rounds to 0 px"), std::string::npos) << e.what();
  }
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
  c.hash_vocab = *rc::gen::element(0, *rc::gen::inRange(1, 3000));  // ranked, or text hashed
  VisionInputs in = make_vision_inputs(c);
  in.gate.route_scale = *rc::gen::element(1.5f, 2.5f, 0.25f);  // V4 / V4.1-Flash, V4-Pro, other
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
  const LaunchLog predicted = sim::predict_vision(
      in.grid.dim(0), in.grid.dim(1), c.width, in.rope.x.dim(0), c.heads, c.head_dim,
      in.gate.logits.dim(0), c.experts, c.top_k, in.gate.hashed_tokens(), c.act);
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
    for (int hash_vocab : {0, 500}) {  // ranked; text hashed (bias_text still given)
      VisionCase c;
      c.image_w = 300, c.image_h = 200, c.act = act, c.seed = 9, c.hash_vocab = hash_vocab;
      const VisionInputs in = make_vision_inputs(c);
      for (const auto& t : compare_vision(in, run_vision(in, act, {Backend::cuda, {}, 128}), act))
        EXPECT_TRUE(t.result.pass)
            << t.name << " hash_vocab " << hash_vocab << ": " << t.result.summary();
    }
    MoeGateInputs hashed = gate_inputs(3, 40, 6, 4);  // and without a text bias
    hashed.tid2eid = seeded_tid2eid(50, 40, 6, 4, 1);
    hashed.token_ids = {0, 0, 0, 7, 49, 13};
    hashed.bias_text.clear();
    for (const TensorCheck& t :
         compare_gate(hashed, run_moe_gate(hashed, {Backend::cuda, {}, 128})))
      EXPECT_TRUE(t.result.pass) << "no bias_text " << t.name << ": " << t.result.summary();
  }
}

// Hash routing (V4's first layers): a text token's experts are its id's tid2eid row, in order,
// whatever its logits and the biases; their weights are the unbiased scores at them,
// renormalised, times route_scale; image tokens rank s + bias_vl as without a table. Kernel
// and reference alike, bytes as the simulator's.
RC_GTEST_PROP(VisionGate, HashedTextTokensTakeTheirIdsRowImageTokensRank, ()) {
  const int E = *rc::gen::inRange(1, kMoeMaxExperts + 1);
  const int k = *rc::gen::inRange(1, std::min(E, kMoeMaxTopK) + 1);
  const int V = *rc::gen::inRange(1, 200);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const MoeGateInputs ranked =
      make_gate_inputs(*rc::gen::inRange(0, 6), *rc::gen::inRange(1, 9), E, k, 0, seed);
  MoeGateInputs in = ranked;
  in.tid2eid = seeded_tid2eid(V, E, k, seed, 3);
  for (size_t t = 0; t < in.is_image.size(); ++t)
    in.token_ids.push_back(in.is_image[t] ? -7 : *rc::gen::inRange(0, V));  // image ids unread
  if (*rc::gen::arbitrary<bool>()) in.bias_text.clear();  // a hash layer has no text bias
  const int64_t T = in.logits.dim(0);
  const MoeGateOutputs out = run_moe_gate(in, {Backend::emu, {}, 128});
  const reference::MoeGateRef ref = reference::moe_gate<double>(in);
  const Tensor<int32_t> rank_experts = reference::moe_gate<double>(ranked).experts;
  RC_ASSERT(out.experts.data == ref.experts.data);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const size_t at = size_t(t * k + j);
      RC_ASSERT(ref.experts.data[at] ==
                (in.is_image[size_t(t)]
                     ? rank_experts.data[at]
                     : in.tid2eid.data[size_t(in.token_ids[size_t(t)] * k + j)]));
    }
  for (int64_t t = 0; t < T; ++t) {  // the unbiased scores at the experts, normalised, scaled
    double s[kMoeMaxTopK], sum = 0;
    for (int j = 0; j < k; ++j) {
      const double l = in.logits.data[size_t(t * E + ref.experts.data[size_t(t * k + j)])];
      sum += s[j] = std::sqrt(l > 20 ? l : std::log1p(std::exp(l)));
    }
    // 1e-15: the same double formula in the same order; only rounding could tell them apart.
    for (int j = 0; j < k; ++j)
      RC_ASSERT(std::fabs(ref.weights.data[size_t(t * k + j)] -
                          s[j] / (sum + 1e-20) * in.route_scale) <= 1e-15 * in.route_scale);
  }
  for (const TensorCheck& c : compare_gate(in, out)) {
    RC_LOG() << c.name << ": " << c.result.summary();
    RC_ASSERT(c.result.pass);
  }
  const LaunchCounts want = sim::predict_moe_gate(T, E, k, in.hashed_tokens());
  RC_ASSERT(out.launches.size() == 1u);
  RC_ASSERT(out.launches[0].read == want.read);
  RC_ASSERT(out.launches[0].written == want.written);
}

// The table's rows: k distinct experts of [0, E) each (k = E included), the same for a seed and
// stream, another for another stream.
RC_GTEST_PROP(VisionGate, SeededTablesRowsAreDistinctExperts, ()) {
  const int E = *rc::gen::inRange(1, 400), k = *rc::gen::inRange(1, std::min(E, 16) + 1);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  const Tensor<int32_t> t = seeded_tid2eid(64, E, k, seed, 1);
  RC_ASSERT(t.shape == (Shape{64, k}));
  for (int64_t v = 0; v < 64; ++v) {
    std::vector<int32_t> row(t.ptr() + v * k, t.ptr() + (v + 1) * k);
    for (int32_t e : row) RC_ASSERT(e >= 0 && e < E);
    std::sort(row.begin(), row.end());
    RC_ASSERT(std::adjacent_find(row.begin(), row.end()) == row.end());
  }
  RC_ASSERT(seeded_tid2eid(64, E, k, seed, 1).data == t.data);
  if (k < E) RC_ASSERT(seeded_tid2eid(64, E, k, seed, 2).data != t.data);
}

// Hostile tables and ids are refused, naming the field, before any launch or lookup.
TEST(VisionGate, BadHashRoutingIsBadInput) {
  MoeGateInputs ok = gate_inputs(2, 16, 3, 5);  // tokens 0-1 image, 2-3 text
  ok.tid2eid = seeded_tid2eid(10, 16, 3, 5, 1);
  ok.token_ids = {-1, 99, 0, 9};  // image tokens' ids are never read
  EXPECT_NO_THROW(validate_moe_gate_inputs(ok));
  auto refused = [&](const std::function<void(MoeGateInputs&)>& spoil, const std::string& what) {
    MoeGateInputs in = ok;
    spoil(in);
    try {
      run_moe_gate(in, {});
      ADD_FAILURE() << "accepted: " << what;
    } catch (const BadInput& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused([](MoeGateInputs& in) { in.token_ids[3] = 10; },
          "token_ids[3] is 10, outside tid2eid's rows [0, 10)");
  refused([](MoeGateInputs& in) { in.token_ids[2] = -1; }, "token_ids[2] is -1");
  refused([](MoeGateInputs& in) { in.token_ids.pop_back(); }, "token_ids [T = 4] expected");
  refused([](MoeGateInputs& in) { in.tid2eid.data[4] = 16; },
          "tid2eid[1, 1] is 16, outside the experts [0, 16)");
  refused([](MoeGateInputs& in) { in.tid2eid.data[0] = -3; }, "tid2eid[0, 0] is -3");
  refused(
      [](MoeGateInputs& in) {
        in.tid2eid = Tensor<int32_t>({10, 2}, 0);
      },
      "tid2eid must be [V, top_k = 3], got [10, 2]");
  refused([](MoeGateInputs& in) { in.bias_vl.clear(); }, "bias_vl must be [E = 16], got 0");
  refused([](MoeGateInputs& in) { in.bias_text.resize(5); }, "bias_text must be [E = 16] or empty");
  refused([](MoeGateInputs& in) { in.tid2eid = {}, in.bias_text.clear(); },
          "bias_text must be [E = 16], got 0");
  refused([](MoeGateInputs& in) { in.tid2eid = {}; }, "token_ids without tid2eid");
  // The reference refuses them too (it would index the table with them).
  MoeGateInputs past = ok;
  past.token_ids[2] = 10;
  expect_bad_input([&] { reference::moe_gate<double>(past); }, "token_ids[2] is 10");
  past = ok, past.tid2eid.data[0] = 16;
  expect_bad_input([&] { reference::moe_gate<float>(past); }, "tid2eid[0, 0] is 16");
  expect_bad_input([] { seeded_tid2eid(4, 3, 4, 1, 1); }, "k = 4 distinct experts of E = 3");
}

// The shipped hash-routing golden case, edited in the test's own directory: a text token's id
// past the table, an entry past the experts, a table shaped otherwise than the config says, each
// BadInput naming the file and the field, before the reference reads with them.
TEST(VisionGolden, HostileHashTablesAreBadInputNamingTheFile) {
  const TestDir tmp;
  const GoldenCaseEdit golden(tmp.path(), "vision_300x200_f32_hashed");
  auto set_int = [](Safetensors& st, const char* name, size_t i, int32_t v) {
    st.tensors.at(name).bytes.replace(4 * i, 4, reinterpret_cast<const char*>(&v), 4);
  };
  const std::string file = golden.manifest()["blob"].get<std::string>() + ": moe gate input: ";
  golden.expect_bad_input(
      [&](nlohmann::json&, Safetensors& st) {
        set_int(st, "gate.token_ids", 183, 500);  // the last token: text
      },
      file + "token_ids[183] is 500, outside tid2eid's rows [0, 500)");
  golden.expect_bad_input(
      [&](nlohmann::json&, Safetensors& st) { set_int(st, "gate.tid2eid", 13, 64); },
      file + "tid2eid[2, 1] is 64, outside the experts [0, 64)");
  golden.expect_bad_manifest([](nlohmann::json& m) { m["config"]["vision"]["hash_vocab"] = 400; },
                             "'gate.tid2eid'");
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

}  // namespace
}  // namespace tandem
