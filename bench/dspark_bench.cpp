// DSpark batched verification throughput: the reference and the kernel (emu always; cuda with a
// GPU), sampling and greedy; the drafter's pass and draft (reference; the optimized twin under
// the emulator and on a GPU); a scheduled batch's decode.
#include <benchmark/benchmark.h>

#include "cases/dspark_case.hpp"
#include "optimized/drafter.hpp"
#include "reference/drafter.hpp"
#include "reference/dspark.hpp"
#include "reference/model_util.hpp"

namespace tandem {
namespace {

// Args: requests, vocab, greedy?
VerifyInputs bench_inputs(const benchmark::State& st) {
  return make_verify_inputs(st.range(0), 5, st.range(1), 1, st.range(2) != 0);
}

void set_counters(benchmark::State& st) {
  st.counters["requests"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                               benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(fmt::format("{} R={} K=5 V={}", st.range(2) ? "greedy" : "sampling", st.range(0),
                          st.range(1)));
}

void BM_DsparkVerifyKernel(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const VerifyInputs in = bench_inputs(st);
  for (auto _ : st) benchmark::DoNotOptimize(run_dspark_verify(in, {backend, {}, 128}));
  set_counters(st);
}

void BM_DsparkVerifyReference(benchmark::State& st) {
  const VerifyInputs in = bench_inputs(st);
  for (auto _ : st) benchmark::DoNotOptimize(reference::dspark_verify(in));
  set_counters(st);
}

void BM_DsparkDrafterPass(benchmark::State& st) {
  DsparkConfig c;
  const int64_t features = 3 * c.backbone_width;
  const reference::DsparkDrafter drafter(c, features, 1);
  const Eigen::MatrixXd f = reference::seeded_matrix(st.range(0), features, 2, 1, 1.0);
  for (auto _ : st) benchmark::DoNotOptimize(drafter.propose(f, 3, c.gamma, {}));
  st.SetLabel(fmt::format("{} cached positions, window {}", st.range(0), c.window));
}

// The optimized drafter (optimized/drafter.hpp): one pass and gamma sampled tokens, passes/s.
void BM_DsparkDrafterKernel(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  DsparkConfig c;
  const int64_t features = 3 * c.backbone_width;
  const reference::DsparkDrafter drafter(c, features, 1);
  const Tensor<float> f = float_rows(reference::seeded_matrix(st.range(0), features, 2, 1, 1.0));
  const DraftChoice choice{false, 1, 0, uint32_t(f.dim(0)) + 1, 1.0};
  for (auto _ : st)
    benchmark::DoNotOptimize(
        run_drafter(c, drafter.weights(), f, 3, 0, c.gamma, choice, {backend, {}, 128}));
  st.counters["passes"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(
      fmt::format("{} cached positions, window {}, {} stages", st.range(0), c.window, c.blocks));
}

// A scheduled batch decoding 8 tokens per request: the drafter (trained on the backbone),
// scheduler, backbone and batched verification (reference or the kernel under the emulator), per
// generated token.
void BM_DsparkScheduledDecode(benchmark::State& st, bool kernel) {
  const DsparkConfig c;
  const int requests = int(st.range(0)), steps = 8;
  reference::Verifier verify = reference::dspark_verify;
  if (kernel)
    verify = [](const VerifyInputs& in) { return run_dspark_verify(in, {Backend::emu, {}, 128}); };
  const reference::DsparkDrafter drafter = reference::trained_drafter(c, 1).drafter;
  for (auto _ : st)
    benchmark::DoNotOptimize(dspark_decode(c, drafter, 1, requests, false, steps, verify));
  st.counters["tokens"] =
      benchmark::Counter(double(requests) * steps, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(fmt::format("R={} {} tokens each, {} verification", requests, steps,
                          kernel ? "emu kernel" : "reference"));
}

void emu_args(benchmark::internal::Benchmark* b) {
  for (int greedy : {0, 1}) b->Args({16, 257, greedy});
}
void gpu_args(benchmark::internal::Benchmark* b) {
  for (int greedy : {0, 1}) b->Args({32, 129280, greedy});
}

BENCHMARK_CAPTURE(BM_DsparkVerifyKernel, emu, Backend::emu)->Apply(emu_args);
BENCHMARK_CAPTURE(BM_DsparkVerifyKernel, cuda, Backend::cuda)
    ->Apply(gpu_args)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DsparkVerifyReference)->Apply(emu_args);
BENCHMARK(BM_DsparkDrafterPass)->Arg(16)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DsparkDrafterKernel, emu, Backend::emu)
    ->Arg(16)
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DsparkDrafterKernel, cuda, Backend::cuda)
    ->Arg(16)
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DsparkScheduledDecode, reference, false)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DsparkScheduledDecode, emu, true)->Arg(16)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
