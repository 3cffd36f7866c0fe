// Causal attention over a KV cache: the kernel (emu always; cuda with a GPU) and the reference.
#include <benchmark/benchmark.h>

#include "cases/attention_case.hpp"
#include "reference/attention.hpp"

namespace tandem {
namespace {

// Args: new tokens, cached positions, d, heads
AttentionInputs bench_inputs(const benchmark::State& st) {
  return make_attention_inputs(st.range(0), st.range(1), st.range(2), int(st.range(3)),
                               ActDType::bf16, 1);
}

void BM_AttentionKernel(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const AttentionInputs in = bench_inputs(st);
  for (auto _ : st) benchmark::DoNotOptimize(run_attention_causal(in, {backend, {}, 128}));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionReference(benchmark::State& st) {
  const AttentionInputs in = bench_inputs(st);
  for (auto _ : st) benchmark::DoNotOptimize(reference::attention_baseline(in));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_AttentionKernel, emu, Backend::emu)
    ->Args({4, 64, 64, 2})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AttentionKernel, cuda, Backend::cuda)
    ->Args({64, 4096, 1024, 8})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionReference)->Args({4, 64, 64, 2})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
