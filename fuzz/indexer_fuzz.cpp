// Differential: index_logits (fuzzed shapes, views, pages, schedules) and topk_select under the
// emulator against the reference. topk_select's fuzzed rows: lengths
// (0, past k, the whole row), scores from fuzzed float bits inside each row's visible length
// (every finite value, +-0, denormals, long runs of equal scores) and NaN past it (never read),
// k up to kTopkMax, schedules and block sizes; V4.1's candidate blocks and the selection inside
// them over the same rows (fuzzed block size and count kept). Indices must be identical.
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "cases/indexer_case.hpp"
#include "fuzz/fuzz_util.hpp"
#include "reference/indexer.hpp"

namespace {

// index_logits at fuzzed shapes: heads, keys, ratio, start (every token's view, empty to whole),
// page size and a seeded page table; the scores within the tolerance policy, lengths exact.
void fuzz_index_logits(FuzzedDataProvider& in, tandem::RunOptions opt) {
  using namespace tandem;
  opt.block_threads = 32 * in.ConsumeIntegralInRange(1, 16);  // the kernel's shared memory
  const KvFormat f = in.PickValueInArray({KvFormat::idx_mxfp4, KvFormat::idx_fp8});
  const int64_t T = in.ConsumeIntegralInRange(1, 3), n = in.ConsumeIntegralInRange(0, 200);
  const int heads = in.ConsumeIntegralInRange(1, kIndexMaxHeads),
            ratio = in.ConsumeIntegralInRange(1, 8);
  const int64_t start = in.ConsumeIntegralInRange<int64_t>(0, ratio * (n + 2));
  const int64_t page = in.ConsumeIntegralInRange(1, 40);
  IndexLogitsInputs x =
      make_index_logits_inputs(f, T, heads, n, ratio, start, page, in.ConsumeIntegral<uint64_t>());
  if (in.ConsumeBool()) x.weight_scale = release_index_weight_scale(heads);
  fuzz::require_pass(
      compare_index_logits(x, run_index_logits(x, opt)),
      fmt::format("index_logits {} T={} H={} n={} r={} start={} page={} scale={} {} block={}",
                  kv_format_name(f), T, heads, n, ratio, start, page, x.weight_scale,
                  opt.schedule.name(), opt.block_threads));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  const RunOptions opt = fuzz::emu_options(in);
  if (in.ConsumeBool()) {
    fuzz_index_logits(in, opt);
    return 0;
  }
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
  // V4.1's candidates over the same rows: fuzzed block size and count kept, and the selection
  // inside them (on the same scores).
  CandidateCase c;
  c.blocks = {topk.scores, topk.lengths, in.ConsumeIntegralInRange(1, 64),
              in.ConsumeIntegralInRange(1, kTopkMax)};
  c.topk = {topk.scores, topk.lengths, reference::candidate_blocks(c.blocks), c.blocks.block,
            topk.top_k};
  fuzz::require_pass(
      compare_candidates(c, run_candidates(c, opt)),
      fmt::format("candidates T={} n={} block={} keep={} k={} {} block={}", T, n, c.blocks.block,
                  c.blocks.keep, topk.top_k, opt.schedule.name(), opt.block_threads));
  return 0;
}
