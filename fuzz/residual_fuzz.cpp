// Differential: the residual kernels (V4 unfused, V4.1 single pass) under the emulator against
// the double reference, for fuzzed shapes, seeds, schedules and block sizes (section 4 policy).
#include <fmt/format.h>

#include "cases/residual_case.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  ResidualConfig cfg;
  cfg.d = 8 * in.ConsumeIntegralInRange(1, 32);
  cfg.sites = in.ConsumeIntegralInRange(1, 4);
  cfg.tokens = in.ConsumeIntegralInRange(1, 6);
  const ResidualPath path =
      in.PickValueInArray({ResidualPath::v4_unfused, ResidualPath::v41_single_pass});
  const ActDType act = in.PickValueInArray({ActDType::f32, ActDType::bf16});
  const float gain = in.PickValueInArray({0.0f, 0.5f, 1.0f, 2.0f});
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const RunOptions opt = fuzz::emu_options(in);
  const ResidualStackInputs inputs = make_residual_inputs(cfg, cfg.tokens, act, seed, gain);
  const auto truth = reference::run_truth(inputs, path);
  fuzz::require_pass(
      check_residual_stack(inputs, path, truth, run_residual_stack(inputs, path, opt)),
      fmt::format("{}/{} d={} sites={} T={} gain={} seed={} {} block={}", residual_path_name(path),
                  act_dtype_name(act), cfg.d, cfg.sites, cfg.tokens, gain, seed,
                  opt.schedule.name(), opt.block_threads));
  return 0;
}
