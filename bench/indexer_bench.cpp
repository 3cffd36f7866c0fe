// index_logits, topk_select and V4.1's candidate kernels: scores or rows /s and bytes/s (the byte
// model's) under emu; on a GPU at the release's sizes (V4.1's 32-head indexer; a V4-Pro CSA layer
// at 1M tokens: 262144 entries, top-1024; V4.1's candidates at 256K tokens: 32768 blocks of 8,
// 2048 kept, top-512 inside). A call uploads its inputs, so on a GPU bytes/s is a lower bound on
// the kernel's memory rate.
#include <benchmark/benchmark.h>

#include "cases/indexer_case.hpp"
#include "reference/indexer.hpp"
#include "sim/indexer_traffic.hpp"

namespace tandem {
namespace {

// Args: rows, entries, k
void BM_TopkSelect(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const TopkInputs in =
      make_topk_inputs(st.range(0), st.range(1), int(st.range(2)), 1, st.range(1), 0.3, 1);
  for (auto _ : st) benchmark::DoNotOptimize(run_topk_select(in, {backend, {}, 512}));
  const LaunchCounts c = sim::predict_topk_select(in.lengths.data, int(st.range(2)));
  uint64_t bytes = 0;
  for (int k = 0; k < kTrafficClasses; ++k) bytes += c.read[k] + c.written[k];
  st.counters["rows"] =
      benchmark::Counter(double(st.range(0)), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["bytes"] = benchmark::Counter(
      double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

void BM_TopkSelectReference(benchmark::State& st) {
  const TopkInputs in =
      make_topk_inputs(st.range(0), st.range(1), int(st.range(2)), 1, st.range(1), 0.3, 1);
  for (auto _ : st) benchmark::DoNotOptimize(reference::topk_select(in));
  st.counters["rows"] =
      benchmark::Counter(double(st.range(0)), benchmark::Counter::kIsIterationInvariantRate);
}

// Args: tokens, heads, keys (format idx_mxfp4, r = 4, every key visible)
void BM_IndexLogits(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const int64_t T = st.range(0), n = st.range(2);
  const int heads = int(st.range(1));
  const IndexLogitsInputs in =
      make_index_logits_inputs(KvFormat::idx_mxfp4, T, heads, n, 4, 4 * n, 64, 1);
  for (auto _ : st) benchmark::DoNotOptimize(run_index_logits(in, {backend, {}, 256}));
  const LaunchCounts c = sim::predict_index_logits(KvFormat::idx_mxfp4, T, heads, n, 4, 4 * n);
  uint64_t bytes = 0;
  for (int k = 0; k < kTrafficClasses; ++k) bytes += c.read[k] + c.written[k];
  st.counters["scores"] =
      benchmark::Counter(double(T * n), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["bytes"] = benchmark::Counter(
      double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

// Args: rows, entries, block, keep, k (r = 1, every entry visible)
void BM_Candidates(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return;
  }
  const int block = int(st.range(2)), keep = int(st.range(3));
  const CandidateCase c = make_candidate_case(st.range(0), st.range(1), 1, st.range(1), 0.3, block,
                                              keep, int(st.range(4)), 1);
  for (auto _ : st) benchmark::DoNotOptimize(run_candidates(c, {backend, {}, 512}));
  uint64_t bytes = 0;
  for (const LaunchCounts& l : {sim::predict_candidate_blocks(c.blocks.lengths.data, block, keep),
                                sim::predict_candidate_topk(c.topk)})
    for (int k = 0; k < kTrafficClasses; ++k) bytes += l.read[k] + l.written[k];
  st.counters["rows"] =
      benchmark::Counter(double(st.range(0)), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["bytes"] = benchmark::Counter(
      double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

BENCHMARK_CAPTURE(BM_Candidates, emu, Backend::emu)
    ->Args({2, 8192, 8, 256, 128})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Candidates, cuda, Backend::cuda)
    ->Args({64, 262144, 8, 2048, 512})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_IndexLogits, emu, Backend::emu)
    ->Args({2, 8, 1024})
    ->Unit(benchmark::kMillisecond);
// V4.1-Flash's indexer (32 heads) over a 256K-token context at r = 2 (131072 keys).
BENCHMARK_CAPTURE(BM_IndexLogits, cuda, Backend::cuda)
    ->Args({4, 32, 131072})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TopkSelect, emu, Backend::emu)
    ->Args({4, 8192, 512})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TopkSelectReference)->Args({4, 8192, 512})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TopkSelect, cuda, Backend::cuda)
    ->Args({64, 262144, 1024})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
