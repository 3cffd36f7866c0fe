// Differential: vision kernels (3x3 unshuffle and inverse, 2D RoPE, biased top-k or hashed MoE
// gate) under the emulator against the reference for fuzzed image sizes, seeds and schedules.
#include <fmt/format.h>

#include "cases/vision_case.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  VisionCase c;
  c.image_w = in.ConsumeIntegralInRange(1, 200);
  c.image_h = in.ConsumeIntegralInRange(1, 200);
  c.top_k = in.ConsumeIntegralInRange(1, 8);
  c.text_tokens = in.ConsumeIntegralInRange(0, 8);
  c.act = in.PickValueInArray({ActDType::f32, ActDType::bf16});
  c.seed = in.ConsumeIntegral<uint64_t>();
  c.hash_vocab = in.ConsumeIntegralInRange(0, 300);  // 0: every token ranks; else text hashes
  const RunOptions opt = fuzz::emu_options(in);
  const VisionInputs inputs = make_vision_inputs(c);
  fuzz::require_pass(compare_vision(inputs, run_vision(inputs, c.act, opt), c.act),
                     fmt::format("vision {}x{} k={} hash_vocab={} seed={} {}", c.image_w, c.image_h,
                                 c.top_k, c.hash_vocab, c.seed, opt.schedule.name()));
  return 0;
}
