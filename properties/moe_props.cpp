// MoE expert FFN (optimized/moe.hpp): the kernel against the reference under the tolerance
// policy, bit-identical under every emulator schedule and block size, counted bytes equal to the
// simulator's, and bad inputs named.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <sys/mman.h>

#include "bad_input.hpp"
#include "cases/case_util.hpp"
#include "cases/moe_case.hpp"
#include "core/device_limits.hpp"
#include "core/error.hpp"
#include "core/vision_config.hpp"
#include "emu/emu_test_kernels.hpp"
#include "sim/moe_traffic.hpp"

namespace tandem {
namespace {

RC_GTEST_PROP(MoeExpertsEmu, KernelMatchesReferenceUnderEverySchedule, ()) {
  // d up to 320: past a 32-thread block's one pass (128 f32 or 256 bf16 values), so threads
  // also take a second pass over y and f.
  const int64_t T = *rc::gen::inRange(1, 6), d = 8 * *rc::gen::inRange(1, 41);
  const int64_t H = 4 * *rc::gen::inRange(1, 33), E = *rc::gen::inRange(1, 9);
  const int64_t k = *rc::gen::inRange<int64_t>(1, std::min<int64_t>(E, 4) + 1);
  const auto act = *rc::gen::element(ActDType::f32, ActDType::bf16);
  MoeExpertInputs in = make_moe_inputs(T, d, H, E, k, act, *rc::gen::arbitrary<uint64_t>());
  // Inputs to +-32 (a power of two: still values of act) put some gate and up values past the
  // SwiGLU's limit of 10, so its clamps run against the reference's too.
  const float scale = *rc::gen::element(1.0f, 16.0f);
  for (float& v : in.y.data) v *= scale;
  const MoeReference ref = run_moe_reference(in);
  const auto schedules = emu::test_schedules();
  const MoeExpertOutputs first =
      run_moe_experts(in, {Backend::emu, schedules[0], *rc::gen::element(32, 64, 128)});
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

TEST(MoeExperts, OneExpertWithWeightOneIsTheClampedSwiglu) {
  // k = 1, weight 1, gate = up = W_out = I (H = d): f = silu(min(y, 10)) * clamp(y, +-10), with
  // inputs spread over +-24 so that both clamps bite (the release's swiglu_limit).
  MoeExpertInputs in = make_moe_inputs(3, 8, 8, 2, 1, ActDType::f32, 4);
  for (float& w : in.weights.data) w = 1.0f;
  for (float& y : in.y.data) y *= 12;
  std::fill(in.w_in.data.begin(), in.w_in.data.end(), 0.0f);
  std::fill(in.w_out.data.begin(), in.w_out.data.end(), 0.0f);
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t i = 0; i < 8; ++i)
      in.w_in.data[(e * 16 + i) * 8 + i] = in.w_in.data[(e * 16 + 8 + i) * 8 + i] =
          in.w_out.data[(e * 8 + i) * 8 + i] = 1.0f;
  const MoeExpertOutputs out = run_moe_experts(in, {});
  int above = 0, below = 0;
  for (int64_t i = 0; i < in.y.size(); ++i) {
    const double y = in.y.data[i], g = std::min(y, 10.0);
    above += y > 10, below += y < -10;
    const double want = g / (1 + std::exp(-g)) * std::clamp(y, -10.0, 10.0);
    EXPECT_NEAR(out.f.data[i], want, 4e-7 * (1 + std::fabs(want))) << i << " y " << y;  // expf
  }
  EXPECT_GT(above, 0);
  EXPECT_GT(below, 0);
}

// A table far larger than the test (384 experts of 2 x 256 x 520 values, past
// kMoeMaterialisedValues) materialises only the routed experts, each with its own weights
// (the same values whichever others are materialised), so a token's output does not depend on
// the other tokens' routing; the kernel indexes the materialised ones.
TEST(MoeExperts, ALargeTableMaterialisesTheRoutedExpertsWithTheirOwnWeights) {
  const int64_t d = 520, H = 256, E = 384, k = 6;
  ASSERT_GT(E * 3 * H * d, kMoeMaterialisedValues);
  const MoeExpertInputs two = make_moe_inputs(2, d, H, E, k, ActDType::f32, 7);
  const MoeExpertInputs one = make_moe_inputs(1, d, H, E, k, ActDType::f32, 7);
  EXPECT_EQ(one.w_in.dim(0), k);
  EXPECT_GT(two.w_in.dim(0), k);  // token 1 routes to other experts
  EXPECT_LE(two.w_in.dim(0), 2 * k);
  for (int64_t j = 0; j < k; ++j) {  // token 0's experts: the same weights in both
    const int64_t a = one.experts.data[j], b = two.experts.data[j];
    EXPECT_TRUE(std::equal(one.w_in.ptr() + a * 2 * H * d, one.w_in.ptr() + (a + 1) * 2 * H * d,
                           two.w_in.ptr() + b * 2 * H * d))
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

// Address space for `count` floats with none of it readable (PROT_NONE: no memory committed);
// open() makes one page-aligned range readable and writable.
class FloatReservation {
 public:
  explicit FloatReservation(size_t count) : bytes_(count * sizeof(float)) {
    void* p = mmap(nullptr, bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<float*>(p);
  }
  ~FloatReservation() {
    if (base_) munmap(base_, bytes_);
  }
  FloatReservation(const FloatReservation&) = delete;
  FloatReservation& operator=(const FloatReservation&) = delete;
  float* data() const { return base_; }
  bool open(size_t first, size_t count) const {
    return base_ && mprotect(base_ + first, count * sizeof(float), PROT_READ | PROT_WRITE) == 0;
  }

 private:
  size_t bytes_;
  float* base_ = nullptr;
};

// At V4.1-Flash's widths an expert holds H x d = 11.8M weights per matrix: expert 200 starts
// past 2^31 of them, so its offset needs 64-bit arithmetic (an int product wraps to a negative
// offset). The kernel reading expert 200 of a 201-expert table (only its rows mapped) gives what
// it gives for the same rows as expert 0.
TEST(MoeExpertsEmu, AnExpertPast2To31WeightsIsAddressedIn64Bits) {
  const int64_t d = 5120, H = 2304, expert = 200;
  const size_t per_expert = size_t(H * d);  // w_out's; w_in's is twice it (gate and up)
  ASSERT_GT(expert * H * d, int64_t{INT32_MAX});
  const MoeExpertInputs in = make_moe_inputs(1, d, H, 1, 1, ActDType::f32, 13);
  const FloatReservation w_in(2 * per_expert * (expert + 1)), w_out(per_expert * (expert + 1));
  ASSERT_TRUE(w_in.open(2 * per_expert * expert, 2 * per_expert) &&
              w_out.open(per_expert * expert, per_expert))
      << "cannot reserve 28 GB of address space";
  std::copy(in.w_in.data.begin(), in.w_in.data.end(), w_in.data() + 2 * per_expert * expert);
  std::copy(in.w_out.data.begin(), in.w_out.data.end(), w_out.data() + per_expert * expert);
  const std::vector<float> far =
      emu_test::moe_one_expert(in.y.data, int32_t(expert), w_in.data(), w_out.data(), int(H));
  const std::vector<float> near =
      emu_test::moe_one_expert(in.y.data, 0, in.w_in.ptr(), in.w_out.ptr(), int(H));
  EXPECT_TRUE(std::any_of(near.begin(), near.end(), [](float v) { return v != 0; }));
  EXPECT_EQ(far, near);
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
