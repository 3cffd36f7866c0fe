#pragma once
// Test helper: a synthetic checkpoint in the release's layout (DESIGN 5.6:
// model.safetensors.index.json + two shards, bare names, F8_E4M3 weights with F8_E8M0 block
// scales) holding layers 0, 1 (with Engram) and 2 of a release's mHC, router and Engram tensors,
// seeded; a hash layer's router has ffn.gate.tid2eid in place of ffn.gate.bias.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "core/atomic_file.hpp"
#include "core/checkpoint.hpp"
#include "core/dtype.hpp"
#include "core/engram_config.hpp"
#include "core/philox.hpp"
#include "problem/vision.hpp"  // seeded_tid2eid

namespace tandem {

// V4.1-Flash's layout at d = 64, 8 experts, a vocabulary of 4096, small Engram tables, and one
// hash layer (layer 0: layers 1 and 2 rank).
inline nlohmann::json small_release_json() {
  nlohmann::json j = builtin_release_json("v4.1-flash");
  j["hidden"] = 64, j["routed_experts"] = 8, j["vocab"] = 4096, j["num_hash_layers"] = 1;
  j["engram"]["table_base"] = 50;
  return j;
}
inline ReleaseConfig small_release() {
  return parse_release_config(JsonFields(small_release_json(), "small"));
}
// V4-Flash's layout (no vision tower, no Engram) at the same sizes.
inline nlohmann::json small_v4_release_json() {
  nlohmann::json j = builtin_release_json("v4-flash");
  j["hidden"] = 64, j["routed_experts"] = 8, j["vocab"] = 4096, j["num_hash_layers"] = 1;
  return j;
}

// Values in [-1000, 1000] / 256 times `gain`.
inline Tensor<float> seeded(const Shape& shape, uint32_t id, float gain = 1.0f) {
  Tensor<float> t(shape);
  for (size_t i = 0; i < t.data.size(); ++i)
    t.data[i] = gain * float(int32_t(philox_draw(77, id, uint32_t(i)).v[0] % 2001) - 1000) / 256.0f;
  return t;
}

// Seeded codes of an FP8 format: e4m3 codes, never the NaN codes 0x7f and 0xff; ue8m0 scales
// as a trained table's, 2^-8 .. 2^-1.
inline Tensor<uint8_t> seeded_bytes(const Shape& shape, uint32_t id, DType format) {
  Tensor<uint8_t> t(shape);
  for (size_t i = 0; i < t.data.size(); ++i) {
    const uint32_t v = philox_draw(78, id, uint32_t(i)).v[0];
    t.data[i] =
        format == DType::F8_E4M3 ? uint8_t((v & 0x7f) == 0x7f ? 0 : v) : uint8_t(119 + v % 8);
  }
  return t;
}

inline void put_bytes(Safetensors& st, const std::string& name, DType dtype,
                      const Tensor<uint8_t>& t) {
  st.tensors[name] = {dtype, t.shape, std::string(t.data.begin(), t.data.end())};
}

inline void put_bf16(Safetensors& st, const std::string& name, const Tensor<float>& t) {
  Tensor<bf16> b(t.shape);
  for (size_t i = 0; i < t.data.size(); ++i) b.data[i] = bf16(t.data[i]);
  st.put(name, b);
}

// Layers 0, 1 and 2 of release r: mHC and router in shard 1; with `engram`, layer 1's Engram in
// shard 2 (its table whole: a small release's). The mixing weights fn at the release's scale
// (~1 / sqrt(4d)), so that the sites' sigmoids and Sinkhorn stay in range at any width.
struct Written {
  Safetensors shard1, shard2;
  std::map<std::string, std::string> weight_map;
  Fp8BlockMatrix wkv;
  int64_t table_rows = 0;

  void write(const std::filesystem::path& dir) const {
    write_safetensors(dir / "model-00001-of-00002.safetensors", shard1);
    write_safetensors(dir / "model-00002-of-00002.safetensors", shard2);
    write_index(dir, weight_map);
  }
  static void write_index(const std::filesystem::path& dir,
                          const std::map<std::string, std::string>& map) {
    const nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", map}};
    write_file_atomic(dir / kCheckpointIndex, std::string_view(index.dump()));
  }
};

inline Written make_checkpoint(const ReleaseConfig& r, bool engram = true) {
  Written w;
  const int64_t d = r.hidden, E = r.routed_experts;
  uint32_t id = 0;
  for (int layer : {0, 1, 2}) {
    const std::string p = fmt::format("layers.{}.", layer);
    for (const char* site : {"hc_attn", "hc_ffn"}) {
      w.shard1.put(p + site + "_fn", seeded({24, 4 * d}, ++id, 1.0f / std::sqrt(4.0f * d)));
      w.shard1.put(p + site + "_base", seeded({24}, ++id));
      w.shard1.put(p + site + "_scale", seeded({3}, ++id));
    }
    put_bf16(w.shard1, p + "ffn.gate.weight", seeded({E, d}, ++id));
    if (layer < r.hash_layers)
      w.shard1.put(p + "ffn.gate.tid2eid", seeded_tid2eid(r.vocab, int(E), r.top_k, 79, ++id));
    else
      w.shard1.put(p + "ffn.gate.bias", seeded({E}, ++id));
    if (r.vision) w.shard1.put(p + "ffn.gate.bias_vl", seeded({E}, ++id));  // V4.1's image bias
  }
  for (const auto& [name, t] : w.shard1.tensors)
    w.weight_map[name] = "model-00001-of-00002.safetensors";
  if (!engram) return w;
  const EngramLayerTables tables = engram_tables(*r.engram).at(0);  // layer 1
  w.table_rows = tables.rows;
  const int64_t hd = r.engram->head_dim, in = int64_t(r.engram->lookups()) * hd;
  put_bytes(w.shard2, "layers.1.engram.embed.weight", DType::F8_E4M3,
            seeded_bytes({tables.rows, hd}, ++id, DType::F8_E4M3));
  put_bytes(w.shard2, "layers.1.engram.embed.scale", DType::F8_E8M0,
            seeded_bytes({tables.rows, hd / 32}, ++id, DType::F8_E8M0));
  w.wkv = quantize_fp8_blocks(seeded({5 * d, in}, ++id), r.fp8_block);
  put_bytes(w.shard2, "layers.1.engram.wkv.weight", DType::F8_E4M3, w.wkv.codes);
  put_bytes(w.shard2, "layers.1.engram.wkv.scale", DType::F8_E8M0, w.wkv.scales);
  w.shard2.put("layers.1.engram.q_weight", seeded({4, d}, ++id));
  put_bf16(w.shard2, "layers.1.engram.k_weight", seeded({4, d}, ++id));
  for (const auto& [name, t] : w.shard2.tensors)
    w.weight_map[name] = "model-00002-of-00002.safetensors";
  return w;
}

}  // namespace tandem
