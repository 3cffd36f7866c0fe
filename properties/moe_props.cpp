// MoE expert FFN (optimized/moe.hpp): the kernel against the reference under the tolerance
// policy, bit-identical under every emulator schedule and block size, counted bytes equal to the
// simulator's, and bad inputs named.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "bad_input.hpp"
#include "cases/case_util.hpp"
#include "cases/moe_case.hpp"
#include "core/device_limits.hpp"
#include "core/error.hpp"
#include "core/vision_config.hpp"
#include "sim/moe_traffic.hpp"

namespace tandem {
namespace {

RC_GTEST_PROP(MoeExpertsEmu, KernelMatchesReferenceUnderEverySchedule, ()) {
  const int64_t T = *rc::gen::inRange(1, 6), d = 8 * *rc::gen::inRange(1, 9);
  const int64_t H = 4 * *rc::gen::inRange(1, 33), E = *rc::gen::inRange(1, 9);
  const int64_t k = *rc::gen::inRange<int64_t>(1, std::min<int64_t>(E, 4) + 1);
  const auto act = *rc::gen::element(ActDType::f32, ActDType::bf16);
  const MoeExpertInputs in = make_moe_inputs(T, d, H, E, k, act, *rc::gen::arbitrary<uint64_t>());
  const MoeReference ref = run_moe_reference(in);
  const auto schedules = emu::test_schedules();
  const MoeExpertOutputs first = run_moe_experts(in, {Backend::emu, schedules[0], 128});
  for (const auto& t : compare_moe(ref, first, act)) {
    RC_LOG() << t.name << ": " << t.result.summary();
    RC_ASSERT(t.result.pass);
  }
  for (const auto& s : schedules) {
    const int threads = 32 * *rc::gen::inRange(1, 9);
    RC_ASSERT(run_moe_experts(in, {Backend::emu, s, threads}).f.data == first.f.data);
  }
  RC_ASSERT(same_traffic(first.launches, sim::predict_moe_experts(T, d, H, k, act)));
}

TEST(MoeExperts, OneExpertWithWeightOneIsThatExpertsFfn) {
  // k = 1, weight 1, W_in = I (H = d), W_out = I: f = silu(y), rounded to the storage dtype.
  MoeExpertInputs in = make_moe_inputs(3, 8, 8, 2, 1, ActDType::f32, 4);
  for (float& w : in.weights.data) w = 1.0f;
  std::fill(in.w_in.data.begin(), in.w_in.data.end(), 0.0f);
  std::fill(in.w_out.data.begin(), in.w_out.data.end(), 0.0f);
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t i = 0; i < 8; ++i)
      in.w_in.data[(e * 8 + i) * 8 + i] = in.w_out.data[(e * 8 + i) * 8 + i] = 1.0f;
  const MoeExpertOutputs out = run_moe_experts(in, {});
  for (int64_t i = 0; i < in.y.size(); ++i) {
    const double y = in.y.data[i];
    EXPECT_NEAR(out.f.data[i], y / (1 + std::exp(-y)), 4e-7 * (1 + std::fabs(y))) << i;  // expf
  }
}

// A table far larger than the test (384 experts of 2 x 256 x 520 values, past
// kMoeMaterialisedValues) materialises only the routed experts, each with its own weights
// (the same values whichever others are materialised), so a token's output does not depend on
// the other tokens' routing; the kernel indexes the materialised ones.
TEST(MoeExperts, ALargeTableMaterialisesTheRoutedExpertsWithTheirOwnWeights) {
  const int64_t d = 520, H = 256, E = 384, k = 6;
  ASSERT_GT(E * 2 * H * d, kMoeMaterialisedValues);
  const MoeExpertInputs two = make_moe_inputs(2, d, H, E, k, ActDType::f32, 7);
  const MoeExpertInputs one = make_moe_inputs(1, d, H, E, k, ActDType::f32, 7);
  EXPECT_EQ(one.w_in.dim(0), k);
  EXPECT_GT(two.w_in.dim(0), k);  // token 1 routes to other experts
  EXPECT_LE(two.w_in.dim(0), 2 * k);
  for (int64_t j = 0; j < k; ++j) {  // token 0's experts: the same weights in both
    const int64_t a = one.experts.data[j], b = two.experts.data[j];
    EXPECT_TRUE(std::equal(one.w_in.ptr() + a * H * d, one.w_in.ptr() + (a + 1) * H * d,
                           two.w_in.ptr() + b * H * d))
        << j;
    EXPECT_TRUE(std::equal(one.w_out.ptr() + a * H * d, one.w_out.ptr() + (a + 1) * H * d,
                           two.w_out.ptr() + b * H * d))
        << j;
  }
  const MoeReference ref = run_moe_reference(two);
  const Tensor<double> alone = run_moe_reference(one).truth;
  EXPECT_TRUE(std::equal(alone.data.begin(), alone.data.end(), ref.truth.data.begin()));
  for (const auto& t : compare_moe(ref, run_moe_experts(two, {}), ActDType::f32))
    EXPECT_TRUE(t.result.pass) << t.name << ": " << t.result.summary();
  // Past 2^32 values the counters go on in Philox's stream word instead of wrapping.
  EXPECT_NE(seeded_uniform(7, 2, (uint64_t{1} << 32) + 5, 0, 1), seeded_uniform(7, 2, 5, 0, 1));
}

// V4.1-Flash's widths (d 5120, H 2304) stage (2d + H) floats, 50 KiB: past the 48 KiB default,
// with the opt-in attribute (a launch without it is refused, under emu as on a GPU).
TEST(MoeExpertsEmu, ReleaseWidthsStagePastTheDefaultSharedMemory) {
  const MoeExpertInputs in = make_moe_inputs(1, 5120, 2304, 1, 1, ActDType::bf16, 11);
  ASSERT_GT(sizeof(float) * (2 * 5120 + 2304), kDefaultDynamicShared);
  const MoeExpertOutputs out = run_moe_experts(in, {});
  for (const auto& t : compare_moe(run_moe_reference(in), out, ActDType::bf16))
    EXPECT_TRUE(t.result.pass) << t.name << ": " << t.result.summary();
  EXPECT_TRUE(
      same_traffic(out.launches, sim::predict_moe_experts(1, 5120, 2304, 1, ActDType::bf16)));
}

TEST(MoeExpertsCuda, KernelMatchesReference) {
  const BackendStatus cuda = cuda_status();
  if (!cuda.available) GTEST_SKIP() << cuda.detail;
  for (auto act : {ActDType::f32, ActDType::bf16}) {
    const MoeExpertInputs in = make_moe_inputs(64, 256, 512, 16, 6, act, 9);
    for (const auto& t :
         compare_moe(run_moe_reference(in), run_moe_experts(in, {Backend::cuda, {}, 256}), act))
      EXPECT_TRUE(t.result.pass) << t.name << ": " << t.result.summary();
  }
}

TEST(MoeExperts, BadInputNamesTheTensor) {
  auto expect_bad = [](const MoeExpertInputs& in, const char* part) {
    expect_bad_input([&] { run_moe_experts(in, {}); }, part);
  };
  MoeExpertInputs in = make_moe_inputs(2, 16, 8, 4, 2, ActDType::f32, 1);
  in.experts.data[3] = 4;
  expect_bad(in, "'experts'[1, 1] is 4");
  in = make_moe_inputs(2, 16, 8, 4, 2, ActDType::f32, 1);
  in.weights.data[0] = NAN;
  expect_bad(in, "'weights'[0, 0]");
  in = make_moe_inputs(2, 12, 8, 4, 2, ActDType::f32, 1);
  expect_bad(in, "'y'");
  in = make_moe_inputs(2, 16, 6, 4, 2, ActDType::f32, 1);
  expect_bad(in, "'w_in'");
}

}  // namespace
}  // namespace tandem
