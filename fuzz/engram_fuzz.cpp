// Differential: Engram hash + gather + gate kernels under the emulator against the reference
// for fuzzed token ids (markers included), history, head counts and orders: addresses and rows
// bit-exact, gates and outputs under the section 4 policy. Out-of-range ids are BadInput.
#include <fmt/format.h>

#include "cases/engram_case.hpp"
#include "core/error.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  static const auto map = reference::synthetic_compression_map(4096, 3001, 11);
  FuzzedDataProvider in(data, size);
  EngramConfig cfg;
  cfg.layer_ids = {1, 3};
  cfg.table_base = in.ConsumeIntegralInRange<int64_t>(50, 2000);
  cfg.vocab = 4096;
  cfg.compressed_vocab = 3001;
  cfg.d = 8 * in.ConsumeIntegralInRange(1, 8);
  cfg.heads = in.ConsumeIntegralInRange(1, 8);
  cfg.max_order = in.ConsumeIntegralInRange(2, 4);
  const ActDType act = in.PickValueInArray({ActDType::f32, ActDType::bf16});
  const int layer = in.ConsumeIntegralInRange(0, 1);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const RunOptions opt = fuzz::emu_options(in);
  std::vector<int64_t> ids(in.ConsumeIntegralInRange(1, 24));
  for (int64_t& id : ids) id = in.ConsumeIntegralInRange<int64_t>(-3, 4096);  // -3, 4096: bad
  try {
    EngramInputs inputs = make_engram_inputs(cfg, map, ids, layer, act, seed);
    for (int h = in.ConsumeIntegralInRange(0, 3); h > 0; --h)
      inputs.history.push_back(map.map[in.ConsumeIntegralInRange(0, 4095)]);
    const EngramReference ref = run_engram_reference(inputs);
    fuzz::require_pass(compare_engram(ref, run_engram_layer(inputs, opt), act),
                       fmt::format("engram T={} heads={} order={} d={} seed={} {}", ids.size(),
                                   cfg.heads, cfg.max_order, cfg.d, seed, opt.schedule.name()));
  } catch (const BadInput&) {
    for (int64_t id : ids)
      if (id < -2 || id >= cfg.vocab) return 0;  // the only bad input this target makes
    throw;
  }
  return 0;
}
