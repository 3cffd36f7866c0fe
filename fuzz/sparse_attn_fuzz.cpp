// Differential: sparse_decode_attn under the emulator against the reference for fuzzed shapes
// (V4 / V4.1 formats, heads, window, cache entries, selection size, ratio, positions from the
// ring's first fill on, page sizes), queries scaled 1/8x..64x (as attention_fuzz: 18,243 runs at
// up to 64x raised no false alarm), sinks from -inf to large, random -1 holes in the index lists,
// schedules and block sizes.
#include <fmt/format.h>

#include <cmath>

#include "cases/sparse_attn_case.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  const RunOptions opt = fuzz::emu_options(in);
  SparseAttnShape s;
  s.v41 = in.ConsumeBool();
  s.tokens = in.ConsumeIntegralInRange(1, 2);
  s.heads = 4 * in.ConsumeIntegralInRange(1, 3);
  s.window = in.ConsumeIntegralInRange(1, 130);
  s.n_comp = in.ConsumeIntegralInRange(0, 300);
  s.top_k = in.ConsumeIntegralInRange(1, 128);
  s.ratio = in.PickValueInArray({1, 2, 4, 128});
  s.start = in.ConsumeIntegralInRange<int64_t>(0, 1200);
  s.page_size = in.ConsumeIntegralInRange(1, 64);
  SparseAttnInputs x = make_sparse_attn_inputs(s, in.ConsumeIntegral<uint64_t>());
  const float scale = in.ConsumeFloatingPointInRange(0.125f, 64.0f);
  for (float& v : x.q.data) v = bf16_decode(bf16_encode(v * scale));
  for (float& sink : x.sinks.data)
    sink = in.ConsumeBool() ? -INFINITY : in.ConsumeFloatingPointInRange(-30.0f, 30.0f);
  for (int32_t& i : x.comp_idx.data)
    if (in.ConsumeBool()) i = -1;
  fuzz::require_pass(
      compare_sparse_attn(run_sparse_attn_reference(x), run_sparse_attn(x, opt)),
      fmt::format("sparse_attn {} T={} H={} window {} n={} k={} r={} start={} "
                  "page={} scale={} {} block={}",
                  s.v41 ? "v41" : "v4", s.tokens, s.heads, s.window, s.n_comp, s.top_k, s.ratio,
                  s.start, s.page_size, scale, opt.schedule.name(), opt.block_threads));
  return 0;
}
