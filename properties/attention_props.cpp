// Causal attention (optimized/attention.hpp): the kernel against the reference under the
// tolerance policy, bit-identical under every schedule and block size, causal (positions after
// a token never change its output), counted bytes equal to the simulator's, bad inputs named.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "bad_input.hpp"
#include "cases/attention_case.hpp"
#include "core/error.hpp"
#include "sim/attention_traffic.hpp"

namespace tandem {
namespace {

RC_GTEST_PROP(AttentionEmu, KernelMatchesReferenceUnderEverySchedule, ()) {
  const int64_t T = *rc::gen::inRange(1, 5), P = *rc::gen::inRange(0, 40);
  const int heads = *rc::gen::inRange(1, 4);
  const int64_t d = heads * *rc::gen::element<int64_t>(4, 8, 16, 40);
  const auto act = *rc::gen::element(ActDType::f32, ActDType::bf16);
  AttentionInputs in = make_attention_inputs(T, P, d, heads, act, *rc::gen::arbitrary<uint64_t>());
  // Queries up to 64x sharpen the softmax toward one-hot (exact: powers of two).
  const float sharpness = *rc::gen::element(1.0f, 4.0f, 64.0f);
  for (float& q : in.q.data) q *= sharpness;
  const auto schedules = emu::test_schedules();
  const AttentionOutputs first = run_attention_causal(in, {Backend::emu, schedules[0], 64});
  for (const auto& t : compare_attention(run_attention_reference(in), first, act)) {
    RC_LOG() << t.name << ": " << t.result.summary();
    RC_ASSERT(t.result.pass);
  }
  for (const auto& s : schedules) {
    const int threads = 32 * *rc::gen::inRange(1, 9);
    RC_ASSERT(run_attention_causal(in, {Backend::emu, s, threads}).o.data == first.o.data);
  }
  RC_ASSERT(same_traffic(first.launches, sim::predict_attention(T, P, d, act)));
}

RC_GTEST_PROP(AttentionEmu, LaterPositionsNeverChangeEarlierTokens, ()) {
  const int64_t T = *rc::gen::inRange(2, 5), P = *rc::gen::inRange(0, 10), d = 16;
  AttentionInputs in =
      make_attention_inputs(T, P, d, 2, ActDType::f32, *rc::gen::arbitrary<uint64_t>());
  const AttentionOutputs before = run_attention_causal(in, {});
  const int64_t last = P + T - 1;  // only the last token sees this position
  for (int64_t c = 0; c < d; ++c)
    in.keys.data[last * d + c] *= -1, in.values.data[last * d + c] += 1;
  const AttentionOutputs after = run_attention_causal(in, {});
  RC_ASSERT(std::equal(after.o.data.begin(), after.o.data.end() - d, before.o.data.begin()));
  RC_ASSERT(!std::equal(after.o.data.end() - d, after.o.data.end(), before.o.data.end() - d));
}

TEST(AttentionCuda, KernelMatchesReference) {
  const BackendStatus cuda = cuda_status();
  if (!cuda.available) GTEST_SKIP() << cuda.detail;
  for (auto act : {ActDType::f32, ActDType::bf16}) {
    const AttentionInputs in = make_attention_inputs(16, 2000, 512, 4, act, 9);
    for (const auto& t : compare_attention(run_attention_reference(in),
                                           run_attention_causal(in, {Backend::cuda, {}, 256}), act))
      EXPECT_TRUE(t.result.pass) << t.name << ": " << t.result.summary();
  }
}

TEST(Attention, BadInputNamesTheTensor) {
  auto expect_bad = [](const AttentionInputs& in, const char* part) {
    expect_bad_input([&] { run_attention_causal(in, {}); }, part);
  };
  AttentionInputs in = make_attention_inputs(2, 3, 16, 2, ActDType::f32, 1);
  in.values.data[17] = INFINITY;
  expect_bad(in, "'values'[1, 1]");
  in = make_attention_inputs(2, 3, 16, 3, ActDType::f32, 1);
  expect_bad(in, "heads = 3");
  in = make_attention_inputs(2, 3, 16, 2, ActDType::f32, 1);
  in.keys = Tensor<float>({1, 16});
  expect_bad(in, "'keys'");
  in = make_attention_inputs(1, kAttentionMaxPositions, 8, 1, ActDType::f32, 1);
  expect_bad(in, "positions");
}

}  // namespace
}  // namespace tandem
