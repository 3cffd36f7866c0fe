// dense_rows throughput: the kernel (emu always; cuda with a GPU) and the reference.
#include <benchmark/benchmark.h>

#include "cases/dense_case.hpp"
#include "reference/dense.hpp"

namespace tandem {
namespace {

// Args: tokens, n_in, n_out
DenseInputs bench_inputs(const benchmark::State& st) {
  return make_dense_inputs(st.range(0), st.range(1), st.range(2), ActDType::bf16, 1);
}

void BM_DenseRowsKernel(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const DenseInputs in = bench_inputs(st);
  for (auto _ : st) benchmark::DoNotOptimize(run_dense_rows(in, {backend, {}, 256}));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DenseRowsReference(benchmark::State& st) {
  const DenseInputs in = bench_inputs(st);
  for (auto _ : st) benchmark::DoNotOptimize(reference::dense_rows_baseline(in));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_DenseRowsKernel, emu, Backend::emu)
    ->Args({4, 64, 256})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DenseRowsKernel, cuda, Backend::cuda)
    ->Args({256, 4096, 4096})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DenseRowsReference)->Args({4, 64, 256})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
