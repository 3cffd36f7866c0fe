// Traffic simulator speed: one report, and a context sweep (what `tandem traffic --out` runs).
#include <benchmark/benchmark.h>

#include "sim/residual_traffic.hpp"
#include "sim/traffic.hpp"

namespace tandem::sim {
namespace {

void BM_TrafficReport(benchmark::State& st) {
  const Preset p = builtin_preset("v4.1-flash");
  Workload w;
  w.images = {{1920, 1080}};
  for (auto _ : st) benchmark::DoNotOptimize(simulate(p, w));
}

void BM_TrafficSweep(benchmark::State& st) {
  const Preset p = builtin_preset("v4.1-flash");
  for (auto _ : st)
    for (int64_t ctx = 1024; ctx <= (int64_t{1} << 20); ctx *= 2) {
      Workload w;
      w.context = ctx;
      benchmark::DoNotOptimize(simulate(p, w));
    }
}

void BM_PredictResidualStack(benchmark::State& st) {
  for (auto _ : st)
    benchmark::DoNotOptimize(
        predict_residual_stack(ResidualPath::v41_single_pass, 4096, 4096, 82, ActDType::bf16));
}

BENCHMARK(BM_TrafficReport);
BENCHMARK(BM_TrafficSweep);
BENCHMARK(BM_PredictResidualStack);

}  // namespace
}  // namespace tandem::sim

BENCHMARK_MAIN();
