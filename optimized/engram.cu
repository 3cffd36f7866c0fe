// Host launchers for the Engram kernels; compiled once per backend from this source.
#include <algorithm>
#include <memory>
#include <vector>

#include "core/fp8_blocks.hpp"
#include "optimized/device_array.cuh"
#include "optimized/engram.cuh"
#include "optimized/engram.hpp"  // host headers first: the emulator's macros come after
#include "optimized/engram_prefetch.hpp"

namespace tandem::TANDEM_BACKEND_NS {
namespace {

constexpr int kGatherThreads = 256;  // 8 warps: 3 rows each for 24 lookups

EngramHashParams hash_params(const EngramInputs& in, int64_t compressed_pad) {
  EngramHashParams p{};
  for (int i = 0; i < in.cfg.max_order; ++i) p.multipliers[i] = in.tables.multipliers[i];
  for (int l = 0; l < in.cfg.lookups(); ++l)
    p.primes[l] = in.tables.primes[l], p.offsets[l] = in.tables.offsets[l];
  p.pad = compressed_pad;
  p.max_order = in.cfg.max_order;
  p.heads = in.cfg.heads;
  p.skip_markers = in.cfg.skip_marker_lookups;
  p.prefetched = !in.table_rows.empty();
  return p;
}

// A sampled table's rows for the chunk, prefetched as the release does (DESIGN 5.2): the host
// computes the addresses from the ids alone and copies each lookup's row, [T, lookups, 264 B]
// (zeros where there is no lookup). BadInput naming 'table_rows' for a row the sample lacks.
std::vector<uint8_t> prefetch_rows(const EngramInputs& in) {
  const int64_t T = int64_t(in.compressed.size());
  const int L = in.cfg.lookups(), B = in.cfg.row_bytes();
  std::vector<int64_t> addresses(size_t(T) * L);
  EngramAddressGenerator(in.cfg, in.tables, in.compressed_pad)
      .generate(in.compressed, in.history, addresses);
  std::vector<uint8_t> rows(addresses.size() * B, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int l = 0; l < L; ++l)
      if (const int64_t a = addresses[t * L + l]; a >= 0)
        std::copy_n(engram_table_row(in, a, t, l), B, rows.begin() + (t * L + l) * B);
  return rows;
}

template <class Act>
void run_gate(const EngramInputs& in, DeviceArray<int64_t>& ids, DeviceArray<float>& rows,
              const RunOptions& opt, EngramOutputs& out) {
  const int64_t T = in.h.dim(0);
  const int d = in.cfg.d, E = in.cfg.lookups() * kEngramHeadDim;
  const int B = in.cfg.wkv_fp8_block;
  DeviceArray<Act> h(in.h.data.size()), h_out(in.h.data.size());
  DeviceArray<float> gate_w(in.gate_w.data.size()), gates(size_t(T) * 4);
  h.upload(to_storage<Act>(in.h));
  gate_w.upload(in.gate_w.data);
  // Wkv as stored: float values, or (FP8) the codes and block scales a checkpoint holds.
  DeviceArray<float> wkv_values(B ? 0 : in.wkv->data.size());
  const Fp8BlockMatrix none;
  const Fp8BlockMatrix& q = B ? in.wkv->fp8_blocks(B) : none;
  DeviceArray<uint8_t> wkv_codes(q.codes.data.size()), wkv_scales(q.scales.data.size());
  if (B) {
    wkv_codes.upload(q.codes.data);
    wkv_scales.upload(q.scales.data);
  } else {
    wkv_values.upload(in.wkv->data);
  }
  const EngramWkv wkv{wkv_values.data(), wkv_codes.data(), wkv_scales.data(), B};
  static_assert(kFp8MinBlock == 32, "engram_gate_shared_bytes counts a scale per 32 inputs");
  // The attribute always: static + dynamic past 48 KiB needs it too.
  const size_t smem = engram_gate_shared_bytes(E, d);
  TANDEM_ALLOW_DYNAMIC_SHARED(engram_gate<Act>, smem);
  TANDEM_LAUNCH(launch_name("engram_gate", act_dtype_of<Act>()).c_str(), engram_gate<Act>,
                dim3(unsigned(T)), dim3(opt.block_threads), smem, h.data(),
                ids.data() + kEngramHistory, rows.data(), wkv, gate_w.data(), d, E,
                static_cast<float>(in.cfg.norm_eps), gates.data(), h_out.data());
  out.gates = Tensor<float>({T, 4}, gates.download());
  out.h_out = download_floats(h_out, in.h.shape);
}

}  // namespace

EngramOutputs run_engram_layer(const EngramInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const int64_t T = static_cast<int64_t>(in.compressed.size());
  const int L = in.cfg.lookups();
  const std::vector<int64_t> ids = engram_ids_with_history(in.compressed, in.history);
  DeviceArray<int64_t> d_ids(ids.size()), d_addresses(size_t(T) * L);
  const std::vector<uint8_t> prefetched =
      in.table_rows.empty() ? std::vector<uint8_t>{} : prefetch_rows(in);
  const std::vector<uint8_t>& table = in.table_rows.empty() ? in.table : prefetched;
  DeviceArray<uint8_t> d_table(table.size());
  DeviceArray<float> d_rows(size_t(T) * L * kEngramHeadDim);
  d_ids.upload(ids);
  d_table.upload(table);
  TANDEM_LAUNCH("engram_hash_gather", engram_hash_gather, dim3(unsigned(T)), dim3(kGatherThreads),
                0, d_ids.data(), hash_params(in, in.compressed_pad), d_table.data(),
                d_addresses.data(), d_rows.data());
  EngramOutputs out;
  out.addresses = Tensor<int64_t>({T, L}, d_addresses.download());
  out.rows = Tensor<float>({T, int64_t{L} * kEngramHeadDim}, d_rows.download());
  if (in.act == ActDType::f32)
    run_gate<float>(in, d_ids, d_rows, opt, out);
  else
    run_gate<bf16>(in, d_ids, d_rows, opt, out);
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
