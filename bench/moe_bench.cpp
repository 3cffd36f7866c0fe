// MoE expert FFN throughput: the kernel (emu always; cuda with a GPU) and the reference.
#include <benchmark/benchmark.h>

#include "cases/moe_case.hpp"
#include "reference/moe.hpp"

namespace tandem {
namespace {

// Args: tokens, d, hidden, experts, k
MoeExpertInputs bench_inputs(const benchmark::State& st) {
  return make_moe_inputs(st.range(0), st.range(1), st.range(2), st.range(3), st.range(4),
                         ActDType::bf16, 1);
}

void BM_MoeExpertsKernel(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const MoeExpertInputs in = bench_inputs(st);
  for (auto _ : st) benchmark::DoNotOptimize(run_moe_experts(in, {backend, {}, 256}));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MoeExpertsReference(benchmark::State& st) {
  const MoeExpertInputs in = bench_inputs(st);
  for (auto _ : st) benchmark::DoNotOptimize(reference::moe_experts_baseline(in));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_MoeExpertsKernel, emu, Backend::emu)
    ->Args({4, 64, 128, 64, 6})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MoeExpertsKernel, cuda, Backend::cuda)
    ->Args({256, 1024, 512, 64, 6})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MoeExpertsReference)->Args({4, 64, 128, 64, 6})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
