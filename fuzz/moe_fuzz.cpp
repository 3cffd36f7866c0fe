// Differential: the MoE expert kernel under the emulator against the reference for fuzzed
// shapes, routing (repeated experts included), gate weights, seeds, schedules and block sizes.
#include <fmt/format.h>

#include "cases/moe_case.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  const int64_t T = in.ConsumeIntegralInRange(1, 4), d = 8 * in.ConsumeIntegralInRange(1, 8);
  const int64_t H = 4 * in.ConsumeIntegralInRange(1, 32), E = in.ConsumeIntegralInRange(1, 8);
  const int64_t k = in.ConsumeIntegralInRange(1, 6);
  const ActDType act = in.PickValueInArray({ActDType::f32, ActDType::bf16});
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const RunOptions opt = fuzz::emu_options(in);
  MoeExpertInputs inputs = make_moe_inputs(T, d, H, E, k, act, seed);
  for (int32_t& e : inputs.experts.data) e = in.ConsumeIntegralInRange<int32_t>(0, int32_t(E - 1));
  for (float& w : inputs.weights.data) w = in.ConsumeFloatingPointInRange(-2.0f, 2.0f);
  fuzz::require_pass(compare_moe(run_moe_reference(inputs), run_moe_experts(inputs, opt), act),
                     fmt::format("moe T={} d={} H={} E={} k={} seed={} {} block={}", T, d, H, E, k,
                                 seed, opt.schedule.name(), opt.block_threads));
  return 0;
}
