// Differential: the KV cache kernels under the emulator against the reference. The quantizers
// take raw fuzzed floats (NaN, +-Inf, -0, subnormals, amax edges: the stated rule of
// problem/kv_record.hpp, identical bytes in kernel and reference); the window store, the
// compressors (prefill, then token by token: bit-identical) and the index keys take fuzzed
// shapes, seeds, input scales, page sizes, schedules and block sizes.
#include <fmt/format.h>

#include <cstring>

#include "cases/kvcache_case.hpp"
#include "fuzz/fuzz_util.hpp"
#include "reference/kvcache.hpp"

namespace tandem {
namespace {

constexpr KvFormat kFormats[] = {KvFormat::v32_fp8,    KvFormat::idx_fp8, KvFormat::model1,
                                 KvFormat::v41_window, KvFormat::v41_fp4, KvFormat::idx_mxfp4};

void fuzz_quantize(FuzzedDataProvider& in, const RunOptions& opt) {
  const KvFormat f = in.PickValueInArray(kFormats);
  const int64_t rows = in.ConsumeIntegralInRange(1, 6), page = in.ConsumeIntegralInRange(1, 8);
  KvQuantizeInputs q = make_kv_quantize_inputs(f, rows, page, in.ConsumeIntegral<uint64_t>());
  q.store.canonical_zero = in.ConsumeBool();
  // Raw bits over a prefix of the values: any float the fuzzer finds, NaN payloads included.
  for (float& v : q.values.data) {
    if (in.remaining_bytes() < 4) break;
    const uint32_t bits = in.ConsumeIntegral<uint32_t>();
    std::memcpy(&v, &bits, 4);
    v = in.ConsumeBool() ? v : bf16_decode(bf16_encode(v));
  }
  const KvStoreOutputs out = run_kv_quantize(q, opt);
  const Tensor<uint8_t> want = reference::encode_pool(q);
  if (out.pool.data != want.data)
    fuzz::fail(fmt::format("kv_quantize {} rows={} page={}: kernel bytes differ from the reference",
                           kv_format_name(f), rows, page));
}

void fuzz_store(FuzzedDataProvider& in, const RunOptions& opt) {
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const int64_t d = 8 * in.ConsumeIntegralInRange(1, 8), page = in.ConsumeIntegralInRange(1, 8);
  const float scale = in.ConsumeFloatingPointInRange(1e-3f, 1e3f);
  const double eps = in.PickValueInArray({1e-6, 1e-20, 0.0, 1e-2});
  auto scaled = [&](Tensor<float>& x) {
    for (float& v : x.data) v = bf16_decode(bf16_encode(v * scale));
  };
  const std::string what = fmt::format("seed={} d={} page={} scale={} eps={} {} block={}", seed, d,
                                       page, scale, eps, opt.schedule.name(), opt.block_threads);
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0: {
      const KvFormat f =
          in.PickValueInArray({KvFormat::v32_fp8, KvFormat::model1, KvFormat::v41_window});
      const int window = in.ConsumeIntegralInRange(1, 24);
      const int64_t T = in.ConsumeIntegralInRange(1, window);
      KvWindowInputs w = make_kv_window_inputs(f, T, d, window, in.ConsumeIntegralInRange(0, 1000),
                                               page, eps, seed);
      scaled(w.x);
      fuzz::require_pass(compare_kv(run_kv_reference(w), run_kv_window_store(w, opt), w.store),
                         "kv_window_store " + std::string(kv_format_name(f)) + " " + what);
      break;
    }
    case 1: {
      const std::vector<KvCompressor> kinds = release_compressors();
      KvCompressor c = kinds[in.ConsumeIntegralInRange<size_t>(0, kinds.size() - 1)];
      if (c.ratio == 128) c.ratio = in.ConsumeIntegralInRange(5, 12);
      const int64_t T = in.ConsumeIntegralInRange(1, 2 * c.ratio + 2);
      KvCompressInputs k = make_kv_compress_inputs(c, T, d, page, eps, seed);
      scaled(k.x);
      const KvStoreOutputs prefill = run_kv_compress(k, opt);
      const std::string name = fmt::format("kv_compress {} r={} T={} {}", c.name, c.ratio, T, what);
      fuzz::require_pass(compare_kv(run_kv_reference(k), prefill, k.store), name);
      fuzz::require_pass(compare_decode_chain(prefill, run_kv_decode_chain(k, opt)), name);
      break;
    }
    default: {
      const KvFormat f = in.PickValueInArray({KvFormat::idx_mxfp4, KvFormat::idx_fp8});
      IndexKeyInputs k =
          make_index_key_inputs(f, in.ConsumeIntegralInRange(1, 6), in.ConsumeIntegralInRange(1, 8),
                                page, eps, seed, in.ConsumeIntegralInRange(0, 5));
      for (float& v : k.latent.data) v = bf16_decode(bf16_encode(v * scale));
      fuzz::require_pass(compare_kv(run_kv_reference(k), run_index_key_store(k, opt), k.store),
                         "index_key_store " + std::string(kv_format_name(f)) + " " + what);
    }
  }
}

}  // namespace
}  // namespace tandem

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  FuzzedDataProvider in(data, size);
  const RunOptions opt = fuzz::emu_options(in);
  // Every generated input is valid: BadInput escapes as a finding.
  if (in.ConsumeBool())
    fuzz_quantize(in, opt);
  else
    fuzz_store(in, opt);
  return 0;
}
