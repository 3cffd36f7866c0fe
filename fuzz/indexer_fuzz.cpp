// Differential: topk_select under the emulator against the reference for fuzzed rows: lengths
// (0, past k, the whole row), scores from fuzzed float bits inside each row's visible length
// (every finite value, +-0, denormals, long runs of equal scores) and NaN past it (never read),
// k up to kTopkMax, schedules and block sizes. Indices must be identical.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "cases/indexer_case.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  const RunOptions opt = fuzz::emu_options(in);
  const int64_t T = in.ConsumeIntegralInRange(1, 3), n = in.ConsumeIntegralInRange(1, 600);
  TopkInputs topk;
  topk.top_k = in.ConsumeIntegralInRange(1, kTopkMax);
  topk.scores = Tensor<float>({T, n}, NAN);
  topk.lengths = Tensor<int32_t>({T});
  const float levels[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, 3.4e38f};
  for (int64_t t = 0; t < T; ++t) {
    const int32_t length = in.ConsumeIntegralInRange<int32_t>(0, int32_t(n));
    topk.lengths.data[size_t(t)] = length;
    for (int32_t j = 0; j < length; ++j) {
      float v = in.PickValueInArray(levels);
      if (in.remaining_bytes() >= 4 && in.ConsumeBool()) {
        const uint32_t bits = in.ConsumeIntegral<uint32_t>();
        std::memcpy(&v, &bits, 4);
        if (!std::isfinite(v)) v = 0.5f;  // the scores a row sees are finite
      }
      topk.scores.data[size_t(t * n + j)] = v;
    }
  }
  fuzz::require_pass(compare_topk(topk, run_topk_select(topk, opt)),
                     fmt::format("topk T={} n={} k={} {} block={}", T, n, topk.top_k,
                                 opt.schedule.name(), opt.block_threads));
  return 0;
}
