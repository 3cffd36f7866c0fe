// Differential: causal attention under the emulator against the reference for fuzzed token
// counts, cache lengths, head layouts, seeds, schedules and block sizes, queries scaled 1x to 64x
// (near one-hot softmaxes, where an output hangs on one or two score roundings: the reference
// draws its baseline in enough orders per head for that, see run_attention_reference).
#include <fmt/format.h>

#include "cases/attention_case.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  const int64_t T = in.ConsumeIntegralInRange(1, 4), P = in.ConsumeIntegralInRange(0, 64);
  const int heads = in.ConsumeIntegralInRange(1, 4);
  const int64_t d = heads * in.ConsumeIntegralInRange(1, 48);
  const ActDType act = in.PickValueInArray({ActDType::f32, ActDType::bf16});
  const float sharpness = in.PickValueInArray({1.0f, 2.0f, 4.0f, 8.0f, 16.0f, 32.0f, 64.0f});
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const RunOptions opt = fuzz::emu_options(in);
  AttentionInputs inputs = make_attention_inputs(T, P, d, heads, act, seed);
  for (float& q : inputs.q.data) q *= sharpness;  // exact: a power of two
  fuzz::require_pass(
      compare_attention(run_attention_reference(inputs), run_attention_causal(inputs, opt), act),
      fmt::format("attention T={} P={} d={} heads={} x{} seed={} {} block={}", T, P, d, heads,
                  sharpness, seed, opt.schedule.name(), opt.block_threads));
  return 0;
}
