// KV cache write throughput: records/s and bytes/s of every kernel (emu always; cuda with a GPU,
// where bytes/s is the kernel's global-memory rate), and the float reference for scale.
#include <benchmark/benchmark.h>

#include "cases/kvcache_case.hpp"
#include "reference/kvcache.hpp"
#include "sim/kvcache_traffic.hpp"

namespace tandem {
namespace {

bool skip_without(benchmark::State& st, Backend backend) {
  if (backend == Backend::cuda && !cuda_status().available) {
    st.SkipWithError(cuda_status().detail.c_str());
    return true;
  }
  return false;
}

// records per second, and the bytes the kernels moved per second (counted under emu, the byte
// model's launches on a GPU: the same by the verify rows' check).
void report(benchmark::State& st, int64_t records, const LaunchLog& launches) {
  uint64_t bytes = 0;
  for (const LaunchCounts& l : launches)
    for (int c = 0; c < kTrafficClasses; ++c) bytes += l.read[c] + l.written[c];
  st.counters["records"] =
      benchmark::Counter(double(records), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["bytes"] = benchmark::Counter(
      double(bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

// Args: format, rows
void BM_KvQuantize(benchmark::State& st, Backend backend) {
  if (skip_without(st, backend)) return;
  const KvFormat f = KvFormat(st.range(0));
  const KvQuantizeInputs in = make_kv_quantize_inputs(f, st.range(1), 64, 1);
  st.SetLabel(kv_format_name(f));
  for (auto _ : st) benchmark::DoNotOptimize(run_kv_quantize(in, {backend, {}, 256}));
  report(st, st.range(1), sim::predict_kv_quantize(f, st.range(1)));
}

// Args: format, tokens, d
void BM_KvWindowStore(benchmark::State& st, Backend backend) {
  if (skip_without(st, backend)) return;
  const KvFormat f = KvFormat(st.range(0));
  const KvWindowInputs in = make_kv_window_inputs(f, st.range(1), st.range(2), 128, 0, 64, 1e-6, 1);
  st.SetLabel(kv_format_name(f));
  for (auto _ : st) benchmark::DoNotOptimize(run_kv_window_store(in, {backend, {}, 256}));
  report(st, st.range(1), sim::predict_kv_window_store(f, st.range(1), st.range(2)));
}

// Args: compressor (index into release_compressors()), tokens, d
void BM_KvCompress(benchmark::State& st, Backend backend) {
  if (skip_without(st, backend)) return;
  const KvCompressor c = release_compressors()[size_t(st.range(0))];
  const KvCompressInputs in = make_kv_compress_inputs(c, st.range(1), st.range(2), 64, 1e-6, 1);
  st.SetLabel(c.name);
  for (auto _ : st) benchmark::DoNotOptimize(run_kv_compress(in, {backend, {}, 256}));
  report(st, kv_entries(st.range(1), c.ratio),
         sim::predict_kv_compress(c, st.range(1), st.range(2), false));
}

// Args: format, keys
void BM_IndexKeyStore(benchmark::State& st, Backend backend) {
  if (skip_without(st, backend)) return;
  const KvFormat f = KvFormat(st.range(0));
  const IndexKeyInputs in = make_index_key_inputs(f, st.range(1), 2, 64, 1e-20, 1);
  st.SetLabel(kv_format_name(f));
  for (auto _ : st) benchmark::DoNotOptimize(run_index_key_store(in, {backend, {}, 256}));
  report(st, st.range(1), sim::predict_index_key_store(f, st.range(1)));
}

// The float reference of the window store, for the emulator's overhead.
void BM_KvWindowStoreReference(benchmark::State& st) {
  const KvWindowInputs in =
      make_kv_window_inputs(KvFormat(st.range(0)), st.range(1), st.range(2), 128, 0, 64, 1e-6, 1);
  for (auto _ : st) {
    const auto run = reference::kv_window_store<float, bf16>(in);
    benchmark::DoNotOptimize(reference::encode_pool(in.store, run.stored, run.slots));
  }
  st.counters["records"] =
      benchmark::Counter(double(st.range(1)), benchmark::Counter::kIsIterationInvariantRate);
}

constexpr int64_t kV32 = int64_t(KvFormat::v32_fp8), kModel1 = int64_t(KvFormat::model1),
                  kV41Window = int64_t(KvFormat::v41_window), kV41Fp4 = int64_t(KvFormat::v41_fp4),
                  kIdxMxfp4 = int64_t(KvFormat::idx_mxfp4);

BENCHMARK_CAPTURE(BM_KvQuantize, emu, Backend::emu)
    ->ArgsProduct({{kV32, kModel1, kV41Window, kV41Fp4, kIdxMxfp4}, {256}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_KvWindowStore, emu, Backend::emu)
    ->ArgsProduct({{kModel1, kV41Window}, {16}, {64}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_KvCompress, emu, Backend::emu)
    ->ArgsProduct({{0, 1, 3, 4, 5}, {256}, {64}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_IndexKeyStore, emu, Backend::emu)
    ->ArgsProduct({{kIdxMxfp4}, {16}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KvWindowStoreReference)->Args({kV41Window, 16, 64})->Unit(benchmark::kMillisecond);
// On a GPU, at the release's width (V4.1-Flash d = 5120): GB/s of the same kernels.
BENCHMARK_CAPTURE(BM_KvQuantize, cuda, Backend::cuda)
    ->ArgsProduct({{kV32, kModel1, kV41Window, kV41Fp4, kIdxMxfp4}, {1 << 16}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_KvWindowStore, cuda, Backend::cuda)
    ->ArgsProduct({{kModel1, kV41Window}, {128}, {5120}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_KvCompress, cuda, Backend::cuda)
    ->ArgsProduct({{0, 1, 3, 4, 5}, {4096}, {5120}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_IndexKeyStore, cuda, Backend::cuda)
    ->ArgsProduct({{kIdxMxfp4}, {2048}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
