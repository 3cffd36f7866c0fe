// Engram: host address generation for the prefetch path (addresses/s) at the V4.1 table sizes,
// and the emulated hash+gather+gate with the bytes it gathers, beside its float baseline.
#include <benchmark/benchmark.h>

#include "cases/engram_case.hpp"
#include "optimized/engram_prefetch.hpp"

namespace tandem {
namespace {

void BM_EngramHostAddresses(benchmark::State& st) {
  const EngramConfig cfg;  // V4.1: 24 lookups per token, primes above 16,000,000
  const auto tables = engram_tables(cfg).at(0);
  const auto map = reference::synthetic_compression_map(cfg.vocab, cfg.compressed_vocab, 1);
  const auto ids = reference::compress(synthetic_token_ids(st.range(0), cfg.vocab, 1), map);
  std::vector<int64_t> out(ids.size() * cfg.lookups());
  const EngramAddressGenerator gen(cfg, tables, map.map[cfg.pad_id]);
  for (auto _ : st) {
    gen.generate(ids, {}, out);
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["addresses"] =
      benchmark::Counter(double(out.size()), benchmark::Counter::kIsIterationInvariantRate);
  st.counters["row_bytes"] = benchmark::Counter(double(out.size()) * cfg.row_bytes(),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

EngramInputs layer_inputs(const benchmark::State& st) {
  EngramConfig cfg;
  cfg.layer_ids = {1, 3};
  cfg.table_base = 1000, cfg.vocab = 4096, cfg.compressed_vocab = 3001, cfg.d = 64;
  const auto map = reference::synthetic_compression_map(cfg.vocab, cfg.compressed_vocab, 1);
  return make_engram_inputs(cfg, map, synthetic_token_ids(st.range(0), cfg.vocab, 1), 0,
                            ActDType::bf16, 1);
}

void BM_EngramLayerEmu(benchmark::State& st) {
  const auto in = layer_inputs(st);
  EngramOutputs out;
  for (auto _ : st) benchmark::DoNotOptimize(out = run_engram_layer(in, {}));
  st.counters["gathered_B"] = double(out.launches.at(0).read_bytes(Traffic::weight));
  st.counters["tokens"] =
      benchmark::Counter(double(st.range(0)), benchmark::Counter::kIsIterationInvariantRate);
}

// The float baseline of the same layer (hash, gather, gate): the emulator's yardstick.
void BM_EngramLayerBaseline(benchmark::State& st) {
  const auto in = layer_inputs(st);
  for (auto _ : st) {
    const auto addresses = reference::engram_addresses(in.cfg, in.tables, in.compressed, in.history,
                                                       in.compressed_pad);
    const auto rows = reference::gather_rows(in, addresses);
    const reference::GateProblem p = reference::float_gate_problem(in, rows);
    benchmark::DoNotOptimize(reference::engram_gate_baseline(p.in, p.rows));
  }
  st.counters["tokens"] =
      benchmark::Counter(double(st.range(0)), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_EngramHostAddresses)->Arg(4096)->Arg(65536);
BENCHMARK(BM_EngramLayerEmu)->Arg(16)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EngramLayerBaseline)->Arg(16)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
