// Residual stack throughput: reference (double, float) and optimized (emu always; cuda with a
// GPU). Counters report the activation bytes per token per site the kernels moved (emu-counted).
#include <benchmark/benchmark.h>

#include "cases/residual_case.hpp"

namespace tandem {
namespace {

ResidualStackInputs bench_inputs(const benchmark::State& st) {
  ResidualConfig cfg;
  cfg.d = static_cast<int>(st.range(0));
  cfg.sites = 4;
  const auto act = st.range(2) ? ActDType::bf16 : ActDType::f32;
  return make_residual_inputs(cfg, st.range(1), act, 1);
}

ResidualPath path_of(const benchmark::State& st) {
  return st.range(3) ? ResidualPath::v41_single_pass : ResidualPath::v4_unfused;
}

void set_label(benchmark::State& st) {
  st.SetLabel(fmt::format("{}/{} d={} T={}", residual_path_name(path_of(st)),
                          st.range(2) ? "bf16" : "f32", st.range(0), st.range(1)));
}

void BM_ResidualOptimized(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const auto in = bench_inputs(st);
  ResidualStackOutputs out;
  for (auto _ : st)
    benchmark::DoNotOptimize(out = run_residual_stack(in, path_of(st), {backend, {}, 128}));
  if (backend == Backend::emu) {
    const auto sites = counted_activation_bytes_per_site(out.launches, path_of(st));
    st.counters["act_B_per_token_site"] = static_cast<double>(sites.at(0)) / in.x0.dim(0);
  }
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(in.x0.dim(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
  set_label(st);
}

// The double truth or the float baseline (the emulator's yardstick: same precision, plain loops).
void BM_ResidualReference(benchmark::State& st, bool truth) {
  const auto in = bench_inputs(st);
  const auto run = truth ? reference::run_truth : reference::run_baseline;
  for (auto _ : st) benchmark::DoNotOptimize(run(in, path_of(st)));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(in.x0.dim(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
  set_label(st);
}

// Args: d, tokens, bf16?, v41?
void residual_args(benchmark::internal::Benchmark* b) {
  for (int v41 : {0, 1})
    for (int bf : {0, 1}) b->Args({256, 16, bf, v41});
}
void gpu_args(benchmark::internal::Benchmark* b) {
  for (int v41 : {0, 1}) b->Args({4096, 4096, 1, v41});
}

BENCHMARK_CAPTURE(BM_ResidualOptimized, emu, Backend::emu)
    ->Apply(residual_args)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ResidualOptimized, cuda, Backend::cuda)
    ->Apply(gpu_args)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ResidualReference, truth, true)
    ->Apply(residual_args)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ResidualReference, baseline, false)
    ->Apply(residual_args)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
