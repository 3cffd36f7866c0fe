// Built-in presets, in the same JSON form a preset file uses. The releases' shapes come from
// core/release_config (DESIGN 5.6); active parameters and the machine are assumptions stated in
// "source".
#include <cmath>

#include "core/atomic_file.hpp"
#include "core/engram_config.hpp"
#include "core/error.hpp"
#include "core/model_config.hpp"
#include "core/release_config.hpp"
#include "problem/kv_record.hpp"
#include "sim/model_traffic.hpp"
#include "sim/traffic.hpp"

namespace tandem::sim {
namespace {

// V3.2 DSA caches a 656-byte main record and a 132-byte FP8 index key in every layer (DESIGN 6).
constexpr double kV32PerLayer = kv_format_info(KvFormat::v32_fp8).record_bytes() +
                                kv_format_info(KvFormat::idx_fp8).record_bytes();

// A preset's Engram fields from an Engram layout: its layers, lookups, row bytes and the mean rows
// of a layer's tables (they differ by a few rows: distinct primes).
nlohmann::json engram_preset_fields(const EngramConfig& e) {
  int64_t rows = 0;
  for (const EngramLayerTables& t : engram_tables(e)) rows += t.rows;
  const int64_t layers = int64_t(e.layer_ids.size());
  return {{"engram_layers", layers},
          {"engram_lookups", e.lookups()},
          {"engram_row_bytes", e.row_bytes()},
          {"engram_rows_per_layer", layers ? rows / layers : 0}};
}

// A release's preset: its shapes from core/release_config (DESIGN 5.6); the weights one decode
// step reads and the machine are assumptions, stated in "source".
nlohmann::json release_preset(const std::string& name, double active_param_bytes,
                              const std::string& assumed) {
  const ReleaseConfig r = builtin_release(name);
  nlohmann::json p = {{"name", r.name},
                      {"layers", r.layers},
                      {"d", r.hidden},
                      {"act_bytes", 2},
                      {"active_param_bytes", active_param_bytes},
                      {"kv_bytes_per_token", r.kv_bytes_per_token()},
                      {"kv_v32_bytes_per_token", r.layers * kV32PerLayer},
                      {"window_entry_bytes", r.window_record_bytes},
                      {"window_tokens", r.window},
                      {"engram_layers", 0},
                      {"engram_lookups", 24},
                      {"engram_row_bytes", 264},
                      {"engram_rows_per_layer", 0},
                      {"hbm_GBps", 4800},
                      {"host_link_GBps", 64},
                      {"gamma", 5},
                      {"source", r.source + "; assumed: " + assumed}};
  if (r.engram) p.update(engram_preset_fields(*r.engram));
  return p;
}

// The end-to-end tiny model of tandem verify: its blocks, width, Engram layout and cache layout
// (its V4.1 layer mix: sim/model_traffic.hpp model_as_release); weights and machine assumed.
nlohmann::json tiny_preset() {
  const ModelConfig m = builtin_model("tiny");
  const ReleaseConfig r = model_as_release(m);
  nlohmann::json p = {
      {"name", "tiny"},
      {"layers", m.shape.blocks},
      {"d", m.residual.d},
      {"act_bytes", 4},  // the end-to-end model's activations are f32
      {"active_param_bytes", 2e6},
      {"kv_bytes_per_token", r.kv_bytes_per_token()},
      {"kv_v32_bytes_per_token", m.shape.blocks * kV32PerLayer},
      {"window_entry_bytes", r.window_record_bytes},
      {"window_tokens", r.window},
      {"hbm_GBps", 4800},
      {"host_link_GBps", 64},
      {"gamma", 5},
      {"source", fmt::format("the end-to-end model of tandem verify (d = {}, {} blocks, its "
                             "layer mix); assumed: 2 MB active weights, H200",
                             m.residual.d, m.shape.blocks)}};
  p.update(engram_preset_fields(m.engram));
  return p;
}

nlohmann::json make_presets() {
  const nlohmann::json tiny = tiny_preset();
  const std::string h200 = "H200 (4.8 TB/s HBM, 64 GB/s PCIe), DSpark gamma 5";
  return nlohmann::json::array(
      {tiny, release_preset("v4-flash", 13e9, "13 GB active FP8 weights, " + h200),
       release_preset("v4-pro", 49e9, "49 GB active FP8 weights, " + h200),
       release_preset("v4.1-flash", 13e9, "13 GB active FP8 weights, " + h200)});
}

// Built once: the release presets parse their configs and walk the Engram primes.
const nlohmann::json& presets() {
  static const nlohmann::json all = make_presets();
  return all;
}

}  // namespace

Preset parse_preset(const JsonFields& f) {
  f.reject_unknown({"name", "layers", "d", "act_bytes", "active_param_bytes", "kv_bytes_per_token",
                    "kv_v32_bytes_per_token", "window_entry_bytes", "window_tokens",
                    "engram_layers", "engram_lookups", "engram_row_bytes", "engram_rows_per_layer",
                    "hbm_GBps", "host_link_GBps", "gamma", "source"});
  Preset p;
  p.name = f.label("name");
  p.layers = static_cast<int>(f.integer("layers", 1, 100000));
  p.d = static_cast<int>(f.integer("d", 1, 1 << 20));
  p.act_bytes = static_cast<int>(f.integer("act_bytes", 1, 8));
  p.active_param_bytes = f.number("active_param_bytes", 0, 1e15);
  p.kv_bytes_per_token = f.number("kv_bytes_per_token", 0, 1e9);
  p.kv_v32_bytes_per_token = f.number("kv_v32_bytes_per_token", 0, 1e9);
  p.window_entry_bytes = f.number("window_entry_bytes", 0, 1e6);
  p.window_tokens = static_cast<int>(f.integer("window_tokens", 0, 1 << 20));
  p.engram_layers = static_cast<int>(f.integer("engram_layers", 0, p.layers));
  p.engram_lookups = static_cast<int>(f.integer("engram_lookups", 0, 1 << 16));
  p.engram_row_bytes = static_cast<int>(f.integer("engram_row_bytes", 1, 1 << 20));
  p.engram_rows_per_layer = f.integer("engram_rows_per_layer", 0, int64_t{1} << 50);
  p.hbm_GBps = f.number("hbm_GBps", 1e-3, 1e7);
  p.host_link_GBps = f.number("host_link_GBps", 1e-3, 1e7);
  p.gamma = static_cast<int>(f.integer("gamma", 1, 64));
  p.source = f.string_or("source", "");
  return p;
}

std::vector<std::string> builtin_preset_names() {
  std::vector<std::string> n;
  for (const auto& p : presets()) n.push_back(p["name"].get<std::string>());
  return n;
}

Preset builtin_preset(const std::string& name) {
  const nlohmann::json& all = presets();
  for (const auto& p : all)
    if (p["name"] == name) {
      Preset preset = parse_preset(JsonFields(p, "builtin:" + name));
      preset.builtin = true;
      return preset;
    }
  throw_bad_input("--preset: unknown preset '{}' (built in: tiny, v4-flash, v4-pro, v4.1-flash)",
                  name);
}

Preset load_preset(const std::filesystem::path& path) {
  const nlohmann::json j = parse_json(read_file(path, kMaxJsonBytes), path.string());
  return parse_preset(JsonFields(j, path.string()));
}

}  // namespace tandem::sim
