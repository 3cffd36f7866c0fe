// Host launchers of the KV cache kernels; compiled once per backend from this source.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "optimized/device_array.cuh"
#include "optimized/kvcache.cuh"
#include "optimized/kvcache.hpp"  // host headers first: the emulator's macros come after

namespace tandem::TANDEM_BACKEND_NS {
namespace {

template <KvFormat F>
using FormatTag = std::integral_constant<KvFormat, F>;

// Calls fn(FormatTag<f>{}) for the runtime format f.
template <class Fn>
void with_format(KvFormat f, Fn&& fn) {
  switch (f) {
    case KvFormat::v32_fp8:
      return fn(FormatTag<KvFormat::v32_fp8>{});
    case KvFormat::idx_fp8:
      return fn(FormatTag<KvFormat::idx_fp8>{});
    case KvFormat::model1:
      return fn(FormatTag<KvFormat::model1>{});
    case KvFormat::v41_window:
      return fn(FormatTag<KvFormat::v41_window>{});
    case KvFormat::v41_fp4:
      return fn(FormatTag<KvFormat::v41_fp4>{});
    case KvFormat::idx_mxfp4:
      return fn(FormatTag<KvFormat::idx_mxfp4>{});
  }
}

// The pool's bytes: kKvPoison wherever the launch writes no record (problem/kvcache.hpp).
void poison_pool(DeviceArray<uint8_t>& pool) {
  pool.upload(std::vector<uint8_t>(pool.bytes(), kKvPoison));
}

std::string kv_launch(const char* kernel, const std::string& variant) {
  return launch_name(kernel, ActDType::bf16, variant);
}

}  // namespace

KvStoreOutputs run_kv_quantize(const KvQuantizeInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const KvFormatInfo f = kv_format_info(in.store.format);
  const int64_t N = in.values.dim(0);
  DeviceArray<bf16> values(in.values.data.size());
  DeviceArray<int32_t> slots(in.slots.data.size());
  values.upload(to_storage<bf16>(in.values)), slots.upload(in.slots.data);
  DeviceArray<uint8_t> pool(size_t(kv_pool_bytes(in.store)));
  poison_pool(pool);
  const int warps = opt.block_threads / kWarpSize;
  const unsigned blocks = grid_stride_blocks(N, warps, opt);
  with_format(in.store.format, [&](auto tag) {
    const std::string name = kv_launch("kv_quantize", f.name);
    TANDEM_LAUNCH(name.c_str(), kv_quantize<decltype(tag)::value>, dim3(blocks),
                  dim3(opt.block_threads), sizeof(float) * warps * f.dims(), values.data(),
                  slots.data(), int(N), in.store.page_size, in.store.canonical_zero, in.traffic,
                  pool.data());
  });
  KvStoreOutputs out;
  out.pool = Tensor<uint8_t>({kv_pool_bytes(in.store)}, pool.download());
  out.stored = in.values;  // the quantizers store their inputs
  out.launches = end_run();
  return out;
}

KvStoreOutputs run_kv_window_store(const KvWindowInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const KvFormatInfo f = kv_format_info(in.store.format);
  const int64_t T = in.x.dim(0), d = in.x.dim(1);
  DeviceArray<bf16> x(in.x.data.size()), stored(size_t(T * f.dims()));
  DeviceArray<float> wkv(in.wkv.data.size()), norm_w(in.norm_w.data.size()),
      rope(size_t(T * kKvRopeDims));
  x.upload(to_storage<bf16>(in.x)), wkv.upload(k_major(in.wkv)), norm_w.upload(in.norm_w.data);
  rope.upload(kv_rope_table(in.start, T, in.store.rope_theta).data);
  DeviceArray<uint8_t> pool(size_t(kv_pool_bytes(in.store)));
  poison_pool(pool);
  with_format(in.store.format, [&](auto tag) {
    constexpr KvFormat F = decltype(tag)::value;
    if constexpr (F == KvFormat::idx_fp8 || F == KvFormat::idx_mxfp4) {
      return;  // refused by validate_kv_window_inputs
    } else {
      const std::string name = kv_launch("kv_window_store", f.name);
      TANDEM_LAUNCH(name.c_str(), kv_window_store<F>, dim3(unsigned(T)), dim3(opt.block_threads),
                    sizeof(float) * (d + f.dims()), x.data(), wkv.data(), norm_w.data(),
                    rope.data(), int(d), in.start, in.window, float(in.store.norm_eps),
                    in.store.page_size, in.store.canonical_zero, pool.data(), stored.data());
    }
  });
  KvStoreOutputs out;
  out.pool = Tensor<uint8_t>({kv_pool_bytes(in.store)}, pool.download());
  out.stored = download_floats(stored, {T, f.dims()});
  out.launches = end_run();
  return out;
}

namespace {

// The compressor kernels of one variant (problem/kvcache.hpp kv_compress_variant).
template <KvFormat F, bool kOverlap, bool kGated, bool kApe, bool kRotate>
void launch_compress(const KvCompressInputs& in, const RunOptions& opt, KvStoreOutputs& out) {
  const KvCompressor& c = in.comp;
  const int64_t T = in.x.dim(0), d = in.x.dim(1), W = c.width(), D = c.dims(), R = c.state_rows();
  const int64_t entries =
      in.decode ? (kv_decode_emits(in.pos, c.ratio) ? 1 : 0) : kv_entries(T, c.ratio);
  std::vector<int64_t> positions;
  for (int64_t j = 0; j < entries; ++j)
    positions.push_back(in.decode ? in.pos / c.ratio * c.ratio : j * c.ratio);
  DeviceArray<bf16> x(in.x.data.size()), latent(size_t(entries * D)), stored(size_t(entries * D));
  DeviceArray<float> wkv(in.wkv.data.size()), wgate(in.wgate.data.size()), ape(in.ape.data.size()),
      norm_w(in.norm_w.data.size()), rope(size_t(std::max<int64_t>(entries, 1) * kKvRopeDims));
  DeviceArray<float> state_a(size_t(R * W)), state_b(size_t(kGated ? R * W : 0));
  x.upload(to_storage<bf16>(in.x)), wkv.upload(k_major(in.wkv)), wgate.upload(k_major(in.wgate));
  ape.upload(in.ape.data), norm_w.upload(in.norm_w.data);
  if (entries) rope.upload(kv_rope_table(positions, in.store.rope_theta).data);
  DeviceArray<uint8_t> pool(size_t(kv_pool_bytes(in.store)));
  poison_pool(pool);
  const std::string variant = c.name;
  const float eps = float(in.store.norm_eps);
  if (in.decode) {
    state_a.upload(in.state.a.data);
    if (kGated) state_b.upload(in.state.b.data);
    const std::string name = kv_launch("kv_compress_decode", variant);
    TANDEM_LAUNCH(name.c_str(), (kv_compress_decode<F, kOverlap, kGated, kApe, kRotate>), dim3(1),
                  dim3(opt.block_threads), sizeof(float) * (d + D), x.data(), wkv.data(),
                  wgate.data(), ape.data(), norm_w.data(), rope.data(), int(d), in.pos, c.ratio,
                  eps, in.store.page_size, in.store.canonical_zero, pool.data(), latent.data(),
                  stored.data(), state_a.data(), state_b.data());
  } else {
    DeviceArray<float> a(size_t(T * W)), b(size_t(kGated ? T * W : 0));
    const std::string project = kv_launch("kv_compress_project", variant);
    TANDEM_LAUNCH(project.c_str(), (kv_compress_project<kGated, kApe>), dim3(unsigned(T)),
                  dim3(opt.block_threads), sizeof(float) * d, x.data(), wkv.data(), wgate.data(),
                  ape.data(), int(d), int(W), c.ratio, a.data(), b.data());
    const std::string pooled = kv_launch("kv_compress_pool", variant);
    TANDEM_LAUNCH(pooled.c_str(), (kv_compress_pool<F, kOverlap, kGated, kRotate>),
                  dim3(unsigned(entries + 1)), dim3(opt.block_threads), sizeof(float) * D, a.data(),
                  b.data(), norm_w.data(), rope.data(), int(T), c.ratio, eps, in.store.page_size,
                  in.store.canonical_zero, pool.data(), latent.data(), stored.data(),
                  state_a.data(), state_b.data());
  }
  out.pool = Tensor<uint8_t>({kv_pool_bytes(in.store)}, pool.download());
  out.latent = download_floats(latent, {entries, D});
  out.stored = download_floats(stored, {entries, D});
  out.state.a = Tensor<float>({R, W}, state_a.download());
  // r = 1 keeps no gate: its state's b is -inf throughout, as the reference's.
  out.state.b =
      kGated ? Tensor<float>({R, W}, state_b.download()) : Tensor<float>({R, W}, -INFINITY);
}

}  // namespace

KvStoreOutputs run_kv_compress(const KvCompressInputs& in, const RunOptions& opt) {
  begin_run(opt);
  KvStoreOutputs out;
  using K = KvFormat;
  switch (kv_compress_variant(in.comp)) {  // the order of release_compressors()
    case 0:
      launch_compress<K::model1, true, true, true, false>(in, opt, out);
      break;
    case 1:
      launch_compress<K::idx_mxfp4, true, true, true, true>(in, opt, out);
      break;
    case 2:
      launch_compress<K::idx_fp8, true, true, true, true>(in, opt, out);
      break;
    case 3:
      launch_compress<K::model1, false, true, true, false>(in, opt, out);
      break;
    case 4:
      launch_compress<K::v41_fp4, false, true, false, false>(in, opt, out);
      break;
    default:
      launch_compress<K::v41_fp4, false, false, false, false>(in, opt, out);
      break;
  }
  out.launches = end_run();
  return out;
}

KvStoreOutputs run_index_key_store(const IndexKeyInputs& in, const RunOptions& opt) {
  begin_run(opt);
  const KvFormatInfo f = kv_format_info(in.store.format);
  const int64_t N = in.latent.dim(0);
  std::vector<int64_t> positions(static_cast<size_t>(N));
  for (int64_t j = 0; j < N; ++j) positions[size_t(j)] = (in.first + j) * in.ratio;
  DeviceArray<bf16> latent(in.latent.data.size()), stored(size_t(N * f.dims()));
  DeviceArray<float> wk(in.wk.data.size()), norm_w(in.norm_w.data.size()),
      rope(size_t(N * kKvRopeDims));
  latent.upload(to_storage<bf16>(in.latent)), wk.upload(k_major(in.wk)),
      norm_w.upload(in.norm_w.data);
  rope.upload(kv_rope_table(positions, in.store.rope_theta).data);
  DeviceArray<uint8_t> pool(size_t(kv_pool_bytes(in.store)));
  poison_pool(pool);
  with_format(in.store.format, [&](auto tag) {
    constexpr KvFormat F = decltype(tag)::value;
    if constexpr (F != KvFormat::idx_fp8 && F != KvFormat::idx_mxfp4) {
      return;  // refused by validate_index_key_inputs
    } else {
      const std::string name = kv_launch("index_key_store", f.name);
      TANDEM_LAUNCH(name.c_str(), index_key_store<F>, dim3(unsigned(N)), dim3(opt.block_threads),
                    sizeof(float) * (kKvMainDims + f.dims()), latent.data(), wk.data(),
                    norm_w.data(), rope.data(), in.first, float(in.store.norm_eps),
                    in.store.page_size, in.store.canonical_zero, pool.data(), stored.data());
    }
  });
  KvStoreOutputs out;
  out.pool = Tensor<uint8_t>({kv_pool_bytes(in.store)}, pool.download());
  out.stored = download_floats(stored, {N, f.dims()});
  out.launches = end_run();
  return out;
}

}  // namespace tandem::TANDEM_BACKEND_NS
