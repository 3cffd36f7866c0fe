// Differential: dense_rows under the emulator against the reference for fuzzed shapes, inputs
// (values and scales), bias and GELU, seeds, schedules and block sizes.
#include <fmt/format.h>

#include "cases/case_util.hpp"
#include "cases/dense_case.hpp"
#include "fuzz/fuzz_util.hpp"
#include "reference/residual.hpp"  // store

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  const ActDType act = in.PickValueInArray({ActDType::f32, ActDType::bf16});
  const int64_t T = in.ConsumeIntegralInRange(1, 4);
  const int64_t n_in = (act == ActDType::f32 ? 4 : 8) * in.ConsumeIntegralInRange(1, 32);
  const int64_t n_out = in.ConsumeIntegralInRange(1, 64);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const float scale = in.ConsumeFloatingPointInRange(1e-3f, 1e3f);
  const RunOptions opt = fuzz::emu_options(in);
  DenseInputs inputs = make_dense_inputs(T, n_in, n_out, act, seed);
  if (in.ConsumeBool()) inputs.bias = seeded_tensor({n_out}, seed, 3, -scale, scale);
  inputs.gelu = in.ConsumeBool();
  for (float& v : inputs.x.data) {
    v *= scale;
    v = act == ActDType::bf16 ? reference::store<bf16>(v) : v;
  }
  fuzz::require_pass(compare_dense(run_dense_reference(inputs), run_dense_rows(inputs, opt), act),
                     fmt::format("dense T={} n_in={} n_out={} scale={} seed={} {} block={}", T,
                                 n_in, n_out, scale, seed, opt.schedule.name(), opt.block_threads));
  return 0;
}
