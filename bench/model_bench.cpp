// The end-to-end tiny model on a text prompt: the optimized model (emu always; cuda with a GPU),
// its decode steps on its own cache, and the reference in double (truth) and float (baseline).
#include <benchmark/benchmark.h>

#include "cases/model_case.hpp"

namespace tandem {
namespace {

const ModelConfig& tiny() {
  static const ModelConfig m = builtin_model("tiny");
  return m;
}
const reference::TinyModelWeights& weights() {
  static const auto w = reference::tiny_model_weights(tiny());
  return w;
}

// Arg: prompt tokens (text, seeded)
ModelPrompt bench_prompt(const benchmark::State& st) {
  ModelPrompt p = model_prompt(tiny(), 1, false);
  p.ids.resize(size_t(st.range(0)), 7);
  return p;
}

void BM_ModelOptimized(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  static const ModelWeights w = optimized_model_weights(weights());
  const ModelPrompt p = bench_prompt(st);
  // range(1): the emulator's block workers (host threads running each launch's blocks).
  const RunOptions opt{backend, {}, 128, static_cast<int>(st.range(1))};
  for (auto _ : st) benchmark::DoNotOptimize(run_model(tiny(), w, p, opt));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

// Decode steps on the optimized model's own cache after a prefill of range(0) tokens (outside
// the timing); each iteration appends the greedy token of the last, so the context grows by one
// (reported) and a step costs more as it grows: the launchers upload the whole pools and ring
// every launch (host-resident caches, O(context) copies), a cost a device-resident cache would
// not have.
void BM_ModelDecodeStep(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  static const ModelWeights w = optimized_model_weights(weights());
  const RunOptions opt{backend, {}, 128};
  OptimizedModel model(tiny(), w, opt);
  ModelRun last = append_model(model, w, bench_prompt(st), opt);
  const Tensor<float> no_image({0, tiny().residual.d});
  for (auto _ : st) last = model.append({greedy_token(last)}, no_image);
  st.counters["context"] = double(model.length());
}

void BM_ModelReference(benchmark::State& st) {
  const ModelPrompt p = bench_prompt(st);
  for (auto _ : st) benchmark::DoNotOptimize(run_model_reference(tiny(), weights(), p));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

// The float baseline alone: the emulator's yardstick.
void BM_ModelBaseline(benchmark::State& st) {
  const ModelPrompt p = bench_prompt(st);
  for (auto _ : st) benchmark::DoNotOptimize(run_model_baseline(tiny(), weights(), p));
  st.counters["tokens"] = benchmark::Counter(static_cast<double>(st.range(0)),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

// Args: tokens, block workers.
BENCHMARK_CAPTURE(BM_ModelOptimized, emu, Backend::emu)
    ->Args({12, 1})
    ->Args({12, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ModelOptimized, cuda, Backend::cuda)
    ->Args({256, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ModelDecodeStep, emu, Backend::emu)->Arg(12)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ModelDecodeStep, cuda, Backend::cuda)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ModelReference)->Arg(12)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ModelBaseline)->Arg(12)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
