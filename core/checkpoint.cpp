#include "core/checkpoint.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/atomic_file.hpp"
#include "core/dtype.hpp"
#include "core/engram_config.hpp"
#include "core/error.hpp"
#include "core/json_fields.hpp"

namespace tandem {
namespace {

std::string shape_text(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// A shard is a plain file name in the checkpoint's directory: the index cannot send a read
// elsewhere (`../../etc/passwd`, `/etc/passwd`, `sub/x`).
bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

// Released weights are finite: a NaN or an infinity (or an FP8 code for NaN) is a broken
// checkpoint, refused naming the tensor (its rows would otherwise compare NaN with NaN).
Tensor<float> finite(const Checkpoint& c, const std::string& name, Tensor<float> t) {
  const auto bad =
      std::find_if(t.data.begin(), t.data.end(), [](float v) { return !std::isfinite(v); });
  if (bad != t.data.end())
    c.refuse(name,
             fmt::format("element {} is {}; weights must be finite", bad - t.data.begin(), *bad));
  return t;
}
// E4M3 codes: S.1111.111 is NaN (no infinities); E8M0 scales: 0xff is NaN. `rows`: the tensor's
// rows `t` holds (read_rows), so that the message names the tensor's own row.
Tensor<uint8_t> fp8_codes(const Checkpoint& c, const std::string& name, Tensor<uint8_t> t,
                          bool e8m0, const std::vector<int64_t>& rows = {}) {
  const auto bad = std::find_if(t.data.begin(), t.data.end(), [e8m0](uint8_t b) {
    return e8m0 ? b == 0xff : (b & 0x7f) == 0x7f;
  });
  if (bad == t.data.end()) return t;
  const int64_t at = bad - t.data.begin(), width = t.shape.back();
  const std::string where =
      rows.empty() ? fmt::format("byte {}", at)
                   : fmt::format("row {} byte {}", rows[size_t(at / width)], at % width);
  c.refuse(name, fmt::format("{} is {:#04x}, a NaN {} code; weights must be finite", where, *bad,
                             e8m0 ? "E8M0" : "E4M3"));
}

template <class T>
Tensor<T> typed(const std::string& bytes, const Shape& shape) {
  Tensor<T> t(shape);
  if (!bytes.empty()) std::memcpy(t.data.data(), bytes.data(), bytes.size());
  return t;
}

Tensor<float> read_f32(const Checkpoint& c, const std::string& name, const Shape& shape) {
  return finite(c, name, typed<float>(c.read(name, DType::F32, shape), shape));
}

Tensor<float> bf16_as_float(const std::string& bytes, const Shape& shape) {
  const Tensor<bf16> b = typed<bf16>(bytes, shape);
  Tensor<float> f(shape);
  for (size_t i = 0; i < b.data.size(); ++i) f.data[i] = float(b.data[i]);
  return f;
}

Tensor<float> read_bf16(const Checkpoint& c, const std::string& name, const Shape& shape) {
  return finite(c, name, bf16_as_float(c.read(name, DType::BF16, shape), shape));
}

// A tensor stored as F32 or BF16 (the gate vectors: DESIGN names no dtype), as floats.
Tensor<float> read_f32_or_bf16(const Checkpoint& c, const std::string& name, const Shape& shape) {
  return c.find(name).dtype == DType::BF16 ? read_bf16(c, name, shape) : read_f32(c, name, shape);
}

// A hash layer's token -> experts table: I32 [vocab, top_k], every entry an expert.
Tensor<int32_t> read_tid2eid(const Checkpoint& c, const std::string& name, int64_t vocab, int k,
                             int64_t experts) {
  const Shape shape{vocab, k};
  Tensor<int32_t> t = typed<int32_t>(c.read(name, DType::I32, shape), shape);
  const auto bad = std::find_if(t.data.begin(), t.data.end(),
                                [experts](int32_t e) { return e < 0 || e >= experts; });
  if (bad != t.data.end()) {
    const int64_t at = bad - t.data.begin();
    c.refuse(name, fmt::format("token {} expert {} is {}, outside the experts [0, {})", at / k,
                               at % k, *bad, experts));
  }
  return t;
}

HcSiteTensors read_hc_site(const Checkpoint& c, const std::string& prefix, int64_t d) {
  return {read_f32(c, prefix + "_fn", {24, 4 * d}), read_f32(c, prefix + "_base", {24}),
          read_f32(c, prefix + "_scale", {3})};
}

Fp8BlockMatrix read_fp8_linear(const Checkpoint& c, const std::string& prefix, int64_t out,
                               int64_t in, int block) {
  const Shape scales{(out + block - 1) / block, (in + block - 1) / block};
  const std::string weight = prefix + ".weight", scale = prefix + ".scale";
  return {block,
          fp8_codes(c, weight, typed<uint8_t>(c.read(weight, DType::F8_E4M3, {out, in}), {out, in}),
                    false),
          fp8_codes(c, scale, typed<uint8_t>(c.read(scale, DType::F8_E8M0, scales), scales), true)};
}

}  // namespace

Checkpoint::Checkpoint(const std::filesystem::path& dir)
    : dir_(dir), index_name_((dir / kCheckpointIndex).string()) {
  // Not a symlink, as the shards: the checkpoint is the directory's own files.
  const nlohmann::json index =
      parse_json(read_file(dir / kCheckpointIndex, kMaxJsonBytes, false), index_name_);
  const JsonFields f(index, index_name_);
  f.reject_unknown({"metadata", "weight_map"});
  if (!f.has("weight_map")) throw_bad_input("{}: missing", f.where("weight_map"));
  const nlohmann::json& map = index["weight_map"];
  if (!map.is_object()) throw_bad_input("{}: an object of tensor -> shard", f.where("weight_map"));
  for (const auto& [name, file] : map.items()) {
    if (!file.is_string() || !plain_file_name(file.get<std::string>()))
      throw_bad_input("{}: '{}' -> {}: a shard is a file name in the checkpoint's directory",
                      f.where("weight_map"), brief_text(name), brief(file));
    weight_map_.emplace(name, file.get<std::string>());
  }
}

const SafetensorsFile& Checkpoint::shard_of(const std::string& name) const {
  const auto it = weight_map_.find(name);
  if (it == weight_map_.end())
    throw_bad_input("{}: tensor '{}' missing from weight_map", index_name_, name);
  auto& shard = shards_[it->second];
  if (!shard) {
    const std::filesystem::path path = dir_ / it->second;
    std::error_code ec;
    const auto status = std::filesystem::symlink_status(path, ec);
    if (ec || !std::filesystem::exists(status))
      throw_bad_input("{}: tensor '{}' is in shard '{}', which is missing", index_name_, name,
                      it->second);
    if (std::filesystem::is_symlink(status))
      throw_bad_input("{}: a symlink; shards are files of the checkpoint's directory",
                      path.string());
    shard = std::make_unique<SafetensorsFile>(path, false);  // nor one swapped in since
  }
  return *shard;
}

const StEntry& Checkpoint::find(const std::string& name) const {
  const SafetensorsFile& shard = shard_of(name);
  const auto it = shard.header().tensors.find(name);
  if (it == shard.header().tensors.end())
    throw_bad_input("{}: tensor '{}' missing (the index puts it in this shard)", shard.name(),
                    name);
  return it->second;
}

const StEntry& Checkpoint::entry(const std::string& name, DType dtype, const Shape& shape) const {
  const StEntry& e = find(name);
  if (e.dtype != dtype)
    throw_bad_input("{}: tensor '{}': dtype {} where {} is expected", shard_of(name).name(), name,
                    dtype_name(e.dtype), dtype_name(dtype));
  if (e.shape != shape)
    throw_bad_input("{}: tensor '{}': shape {} where {} is expected", shard_of(name).name(), name,
                    shape_text(e.shape), shape_text(shape));
  return e;
}

std::string Checkpoint::read(const std::string& name, DType dtype, const Shape& shape) const {
  const StEntry& e = entry(name, dtype, shape);
  const SafetensorsFile& shard = shard_of(name);
  if (e.end - e.begin > kMaxReadBytes)
    throw_bad_input("{}: tensor '{}': {} bytes, too large to read whole (read rows)", shard.name(),
                    name, e.end - e.begin);
  return shard.read(e, 0, e.end - e.begin);
}

void Checkpoint::refuse(const std::string& name, const std::string& what) const {
  throw_bad_input("{}: tensor '{}': {}", shard_of(name).name(), name, what);
}

std::string Checkpoint::read_rows(const std::string& name, DType dtype, const Shape& shape,
                                  const std::vector<int64_t>& rows) const {
  const StEntry& e = entry(name, dtype, shape);
  const SafetensorsFile& shard = shard_of(name);
  if (shape.empty() || shape[0] == 0)
    throw_bad_input("{}: tensor '{}' has no rows", shard.name(), name);
  const uint64_t row_bytes = (e.end - e.begin) / uint64_t(shape[0]);
  std::string out;
  for (const int64_t r : rows) {
    if (r < 0 || r >= shape[0])
      throw_bad_input("{}: tensor '{}': row {} outside [0, {})", shard.name(), name, r, shape[0]);
    out += shard.read(e, uint64_t(r) * row_bytes, row_bytes);
  }
  return out;
}

LayerTensors load_layer_tensors(const Checkpoint& c, const ReleaseConfig& r, int layer,
                                const std::vector<int64_t>& engram_rows) {
  if (layer < 0 || layer >= r.layers)
    throw_bad_input("--layer: {} outside the release's layers [0, {})", layer, r.layers);
  const int64_t d = r.hidden;
  const std::string p = fmt::format("layers.{}.", layer);
  LayerTensors t;
  t.layer = layer;
  t.hc_attn = read_hc_site(c, p + "hc_attn", d);
  t.hc_ffn = read_hc_site(c, p + "hc_ffn", d);
  const int64_t E = r.routed_experts;
  const bool hash = layer < r.hash_layers;
  t.gate = {
      read_bf16(c, p + "ffn.gate.weight", {E, d}),
      hash ? Tensor<float>{} : read_f32(c, p + "ffn.gate.bias", {E}),
      r.vision ? read_f32(c, p + "ffn.gate.bias_vl", {E}) : Tensor<float>{},
      hash ? read_tid2eid(c, p + "ffn.gate.tid2eid", r.vocab, r.top_k, E) : Tensor<int32_t>{}};
  if (!r.engram || engram_rows.empty()) return t;
  const auto& ids = r.engram->layer_ids;
  const auto at = std::find(ids.begin(), ids.end(), layer);
  if (at == ids.end()) return t;
  const EngramLayerTables tables = engram_tables(*r.engram).at(size_t(at - ids.begin()));
  const int64_t hd = r.engram->head_dim, in = int64_t(r.engram->lookups()) * hd;
  EngramTensors e;
  e.rows = engram_rows;
  const int64_t n = int64_t(engram_rows.size());
  const std::string embed = p + "engram.embed.weight", embed_scale = p + "engram.embed.scale";
  e.embed = fp8_codes(
      c, embed,
      typed<uint8_t>(c.read_rows(embed, DType::F8_E4M3, {tables.rows, hd}, engram_rows), {n, hd}),
      false, engram_rows);
  e.embed_scale = fp8_codes(
      c, embed_scale,
      typed<uint8_t>(c.read_rows(embed_scale, DType::F8_E8M0, {tables.rows, hd / 32}, engram_rows),
                     {n, hd / 32}),
      true, engram_rows);
  e.wkv = read_fp8_linear(c, p + "engram.wkv", 5 * d, in, r.fp8_block);
  e.q_weight = read_f32_or_bf16(c, p + "engram.q_weight", {4, d});
  e.k_weight = read_f32_or_bf16(c, p + "engram.k_weight", {4, d});
  t.engram = std::move(e);
  return t;
}

}  // namespace tandem
