// sparse_decode_attn throughput: decode steps (a token's attention in one layer) /s and bytes/s
// (the byte model's reads and writes) under emu at a small shape, with the float reference there
// for the emulator's overhead; on a GPU at the release's sizes (DESIGN 5.5, 5.6): window 128 +
// V4.1's top-512 (and, as a heavier point, 2048 selected entries) over a 64K-token context at r =
// 2, V4-Flash's top-512 and V4-Pro's top-1024 (128 heads) at r = 4, 64 tokens a call. A call
// uploads the pools and downloads the outputs, so on a GPU bytes/s is the call's rate, a lower
// bound on the kernel's.
#include <benchmark/benchmark.h>

#include "cases/sparse_attn_case.hpp"
#include "reference/sparse_attn.hpp"
#include "sim/sparse_attn_traffic.hpp"

namespace tandem {
namespace {

// Args: tokens, heads, top_k, compressed entries; window 128, every entry visible (V4.1 r = 2,
// V4 r = 4), pages of 64.
SparseAttnInputs bench_inputs(const benchmark::State& st, bool v41) {
  const int ratio = v41 ? 2 : 4;
  return make_sparse_attn_inputs({.v41 = v41,
                                  .tokens = st.range(0),
                                  .heads = int(st.range(1)),
                                  .window = 128,
                                  .n_comp = st.range(3),
                                  .top_k = int(st.range(2)),
                                  .ratio = ratio,
                                  .start = ratio * st.range(3),
                                  .page_size = 64},
                                 1);
}

void steps_counter(benchmark::State& st) {
  st.counters["steps"] =
      benchmark::Counter(double(st.range(0)), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_SparseAttn(benchmark::State& st, bool v41, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const SparseAttnInputs in = bench_inputs(st, v41);
  for (auto _ : st) benchmark::DoNotOptimize(run_sparse_attn(in, {backend, {}, 256}));
  const LaunchCounts c = sim::predict_sparse_attn(in);
  uint64_t bytes = 0;
  for (int k = 0; k < kTrafficClasses; ++k) bytes += c.read[k] + c.written[k];
  steps_counter(st);
  st.counters["bytes"] = benchmark::Counter(
      double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

void BM_SparseAttnReference(benchmark::State& st, bool v41) {
  const SparseAttnInputs in = bench_inputs(st, v41);
  for (auto _ : st) benchmark::DoNotOptimize(reference::sparse_attn<float, bf16>(in));
  steps_counter(st);
}

BENCHMARK_CAPTURE(BM_SparseAttn, v41_emu, true, Backend::emu)
    ->Args({2, 8, 64, 300})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SparseAttnReference, v41, true)
    ->Args({2, 8, 64, 300})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SparseAttn, v4_emu, false, Backend::emu)
    ->Args({2, 8, 64, 300})
    ->Unit(benchmark::kMillisecond);
// V4.1-Flash (64 heads): top-512, and the 2048 of the candidate blocks, of 32768 entries.
BENCHMARK_CAPTURE(BM_SparseAttn, v41_cuda, true, Backend::cuda)
    ->Args({64, 64, 512, 32768})
    ->Args({64, 64, 2048, 32768})
    ->Unit(benchmark::kMillisecond);
// V4-Flash (64 heads, top-512) and V4-Pro (128 heads, top-1024), 16384 entries (64K tokens).
BENCHMARK_CAPTURE(BM_SparseAttn, v4_cuda, false, Backend::cuda)
    ->Args({64, 64, 512, 16384})
    ->Args({64, 128, 1024, 16384})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
