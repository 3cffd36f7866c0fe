#include "problem/kvcache.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/error.hpp"
#include "core/tensor_checks.hpp"

namespace tandem {

KvCompressor v4_csa_compressor() { return {"v4_csa", 4, true, true, false, KvFormat::model1}; }
KvCompressor v4_csa_index_compressor(KvFormat index_format) {
  return {index_format == KvFormat::idx_fp8 ? "v4_csa_index_fp8" : "v4_csa_index",
          4,
          true,
          true,
          true,
          index_format};
}
KvCompressor v4_hca_compressor() { return {"v4_hca", 128, false, true, false, KvFormat::model1}; }
KvCompressor v41_compressor(int ratio) {
  return {fmt::format("v41_r{}", ratio), ratio, false, false, false, KvFormat::v41_fp4};
}
std::vector<KvCompressor> release_compressors() {
  return {
      v4_csa_compressor(), v4_csa_index_compressor(), v4_csa_index_compressor(KvFormat::idx_fp8),
      v4_hca_compressor(), v41_compressor(2),         v41_compressor(1)};
}
const KvCompressor* find_compressor(const std::string& name) {
  static const std::vector<KvCompressor> all = release_compressors();
  for (const KvCompressor& c : all)
    if (c.name == name) return &c;
  return nullptr;
}

int kv_compress_variant(const KvCompressor& c) {
  const std::vector<KvCompressor> kinds = release_compressors();
  for (size_t k = 0; k < kinds.size(); ++k) {
    const KvCompressor& r = kinds[k];
    if (r.format == c.format && r.overlap == c.overlap && r.ape == c.ape && r.rotate == c.rotate &&
        r.gated() == c.gated())
      return int(k);
  }
  return -1;
}

Tensor<float> kv_rope_table(const std::vector<int64_t>& positions, double theta) {
  constexpr int pairs = kKvRopeDims / 2;
  const int64_t n = int64_t(positions.size());
  Tensor<float> t({n, 2 * pairs});
  for (int64_t k = 0; k < n; ++k)
    for (int i = 0; i < pairs; ++i) {
      const double angle = double(positions[size_t(k)]) * std::pow(theta, -2.0 * i / kKvRopeDims);
      t.data[k * 2 * pairs + i] = float(std::cos(angle));
      t.data[k * 2 * pairs + pairs + i] = float(std::sin(angle));
    }
  return t;
}

Tensor<float> kv_rope_table(int64_t start, int64_t count, double theta) {
  std::vector<int64_t> positions(static_cast<size_t>(count));
  for (int64_t t = 0; t < count; ++t) positions[size_t(t)] = start + t;
  return kv_rope_table(positions, theta);
}

std::vector<int32_t> window_index_list(int64_t pos, int window) {
  std::vector<int32_t> list(window);
  for (int i = 0; i < window; ++i) {
    const int64_t p = pos - window + 1 + i;
    list[i] = p < 0 ? -1 : int32_t(p % window);
  }
  return list;
}

namespace {

void require_shape(const Tensor<float>& t, const Shape& want, const char* what, const char* name) {
  if (t.shape != want)
    throw_bad_input("{} input '{}': shape [{}], expected [{}]", what, name,
                    fmt::join(t.shape, ", "), fmt::join(want, ", "));
  require_finite(t, fmt::format("{} input", what), name);
}

// x [T >= 1, d]: d a multiple of 8 (16-byte bf16 loads) within the kernels' shared-memory row.
int64_t require_hidden(const Tensor<float>& x, const char* what) {
  if (x.shape.size() != 2 || x.dim(0) < 1 || x.dim(1) < 8 || x.dim(1) % 8 ||
      x.dim(1) > kKvMaxHidden)
    throw_bad_input("{} input 'x': expected [T >= 1, d], d a multiple of 8 in [8, {}]", what,
                    kKvMaxHidden);
  if (x.dim(0) > (int64_t{1} << 24)) throw_bad_input("{} input 'x': more than 2^24 tokens", what);
  require_finite(x, fmt::format("{} input", what), "x");
  return x.dim(1);
}

bool is_index_format(KvFormat f) { return f == KvFormat::idx_fp8 || f == KvFormat::idx_mxfp4; }

}  // namespace

void validate_store_options(const KvStoreOptions& o, const char* what) {
  if (int(o.format) < 0 || int(o.format) >= kKvFormats)
    throw_bad_input("{}: unknown record format {}", what, int(o.format));
  if (o.page_size < 1 || o.page_size > (int64_t{1} << 20))
    throw_bad_input("{}: page_size {} outside [1, 2^20]", what, o.page_size);
  if (o.pool_slots < o.page_size || o.pool_slots % o.page_size ||
      o.pool_slots / o.page_size *
              KvPageLayout{kv_format_info(o.format), o.page_size}.page_bytes() >
          (int64_t{1} << 32))
    throw_bad_input("{}: pool of {} slots is not whole pages of {} within 4 GiB", what,
                    o.pool_slots, o.page_size);
  if (!(o.norm_eps >= 0 && o.norm_eps <= 1e-2))
    throw_bad_input("{}: norm_eps {} outside [0, 1e-2]", what, o.norm_eps);
  if (!(o.rope_theta >= 1 && o.rope_theta <= 1e9))
    throw_bad_input("{}: rope_theta {} outside [1, 1e9]", what, o.rope_theta);
}

void validate_kv_quantize_inputs(const KvQuantizeInputs& in) {
  validate_store_options(in.store, "kv_quantize");
  const int dims = kv_format_info(in.store.format).dims();
  if (in.values.shape.size() != 2 || in.values.dim(1) != dims || in.values.dim(0) < 1)
    throw_bad_input("kv_quantize input 'values': expected [N >= 1, {}] for {}", dims,
                    kv_format_name(in.store.format));
  if (in.slots.shape != Shape{in.values.dim(0)})
    throw_bad_input("kv_quantize input 'slots': expected [{}]", in.values.dim(0));
  std::vector<bool> used(size_t(in.store.pool_slots), false);
  for (size_t i = 0; i < in.slots.data.size(); ++i) {
    const int32_t s = in.slots.data[i];
    if (s < 0 || s >= in.store.pool_slots || used[size_t(s)])
      throw_bad_input("kv_quantize input 'slots'[{}] = {}: not a free slot in [0, {})", i, s,
                      in.store.pool_slots);
    used[size_t(s)] = true;
  }
  // NaN and Inf are values the quantizers take (the rule in problem/kv_record.hpp).
}

void validate_kv_window_inputs(const KvWindowInputs& in) {
  const char* what = "kv_window_store";
  validate_store_options(in.store, what);
  if (is_index_format(in.store.format))
    throw_bad_input("{}: format {} is an index key, not a main record", what,
                    kv_format_name(in.store.format));
  if (in.window < 1 || in.window > in.store.pool_slots)
    throw_bad_input("{}: window {} outside [1, pool_slots = {}]", what, in.window,
                    in.store.pool_slots);
  if (in.start < 0 || in.start > (int64_t{1} << 40))
    throw_bad_input("{}: start position {} outside [0, 2^40]", what, in.start);
  const int64_t d = require_hidden(in.x, what);
  if (in.x.dim(0) > in.window)  // two tokens of one launch would race for a slot
    throw_bad_input("{} input 'x': {} tokens for a ring of {} (store the last {} only)", what,
                    in.x.dim(0), in.window, in.window);
  const KvFormatInfo f = kv_format_info(in.store.format);
  require_shape(in.wkv, {f.dims(), d}, what, "wkv");
  require_shape(in.norm_w, {f.normed}, what, "norm_w");
}

void validate_kv_compress_inputs(const KvCompressInputs& in) {
  const char* what = "kv_compress";
  validate_store_options(in.store, what);
  const KvCompressor& c = in.comp;
  if (kv_compress_variant(c) < 0 || c.ratio < 1 || c.ratio > 1024 || (c.overlap && c.ratio < 2))
    throw_bad_input("{}: compressor '{}' (ratio {}, format {}) is not one the kernels take", what,
                    c.name, c.ratio, kv_format_name(c.format));
  if (in.store.format != c.format)
    throw_bad_input("{}: pool format {} but compressor '{}' writes {}", what,
                    kv_format_name(in.store.format), c.name, kv_format_name(c.format));
  const int64_t d = require_hidden(in.x, what), w = c.width();
  require_shape(in.wkv, {w, d}, what, "wkv");
  if (c.gated()) require_shape(in.wgate, {w, d}, what, "wgate");
  if (c.ape) require_shape(in.ape, {c.ratio, w}, what, "ape");
  require_shape(in.norm_w, {c.dims()}, what, "norm_w");
  const int64_t T = in.x.dim(0);
  if (in.decode) {
    if (T != 1) throw_bad_input("{} decode input 'x': one token, got {}", what, T);
    if (in.pos < 0 || in.pos > (int64_t{1} << 40))
      throw_bad_input("{} decode: position {} outside [0, 2^40]", what, in.pos);
    if (in.state.a.shape != Shape{c.state_rows(), w} || in.state.b.shape != in.state.a.shape)
      throw_bad_input("{} decode input 'state.a'/'state.b': expected [{}, {}]", what,
                      c.state_rows(), w);
    require_finite(in.state.a, fmt::format("{} input", what), "state.a");
    for (size_t i = 0; i < in.state.b.data.size(); ++i)
      if (std::isnan(in.state.b.data[i]) || in.state.b.data[i] == INFINITY)
        throw_bad_input("{} input 'state.b'[{}] is {} (finite or -inf only)", what, i,
                        in.state.b.data[i]);
  }
  const int64_t entries = in.decode ? (kv_decode_emits(in.pos, c.ratio) ? in.pos / c.ratio + 1 : 0)
                                    : kv_entries(T, c.ratio);
  if (entries > in.store.pool_slots)
    throw_bad_input("{}: {} entries do not fit a pool of {} slots", what, entries,
                    in.store.pool_slots);
}

void validate_index_key_inputs(const IndexKeyInputs& in) {
  const char* what = "index_key_store";
  validate_store_options(in.store, what);
  if (!is_index_format(in.store.format))
    throw_bad_input("{}: format {} is not an index key format", what,
                    kv_format_name(in.store.format));
  if (in.ratio < 1 || in.ratio > 1024)
    throw_bad_input("{}: ratio {} outside [1, 1024]", what, in.ratio);
  if (in.latent.shape.size() != 2 || in.latent.dim(0) < 1 || in.latent.dim(1) != kKvMainDims)
    throw_bad_input("{} input 'latent': expected [N >= 1, {}]", what, kKvMainDims);
  require_finite(in.latent, fmt::format("{} input", what), "latent");
  if (in.first < 0 || in.first > in.store.pool_slots - in.latent.dim(0))
    throw_bad_input("{}: keys {}..{} (field 'first' = {}) do not fit a pool of {} slots", what,
                    in.first, in.first + in.latent.dim(0) - 1, in.first, in.store.pool_slots);
  require_shape(in.wk, {kIndexKeyDims, kKvMainDims}, what, "wk");
  require_shape(in.norm_w, {kIndexKeyDims}, what, "norm_w");
}

}  // namespace tandem
