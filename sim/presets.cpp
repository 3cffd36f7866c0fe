// Built-in presets, in the same JSON form a preset file uses. Numbers the design gives are cited;
// the rest (hidden width, active parameters, layer split) are assumptions stated in "source".
#include <cmath>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "sim/traffic.hpp"

namespace tandem::sim {
namespace {

// V4 CSA (ratio 4): 584/4 + 68/4 = 163 B per layer; HCA (ratio 128): 584/128 B (DESIGN 5.5).
constexpr double kCsaBytes = 584.0 / 4 + 68.0 / 4, kHcaBytes = 584.0 / 128;
constexpr double kV32PerLayer = 656;

nlohmann::json v4_kv(int csa, int hca) {
  return {{"kv_bytes_per_token", csa * kCsaBytes + hca * kHcaBytes},
          {"kv_v32_bytes_per_token", (csa + hca) * kV32PerLayer}};
}

nlohmann::json presets() {
  nlohmann::json tiny = {{"name", "tiny"},
                         {"layers", 2},
                         {"d", 64},
                         {"act_bytes", 2},
                         {"active_param_bytes", 2e6},
                         {"kv_bytes_per_token", 2 * 356.0},
                         {"kv_v32_bytes_per_token", 2 * kV32PerLayer},
                         {"window_entry_bytes", 528},
                         {"window_tokens", 128},
                         {"engram_layers", 2},
                         {"engram_lookups", 24},
                         {"engram_row_bytes", 264},
                         {"engram_rows_per_layer", 100000},
                         {"hbm_GBps", 4800},
                         {"host_link_GBps", 64},
                         {"gamma", 5},
                         {"source", "the emulator-sized model of tandem verify (d = 64, 4 sites)"}};
  nlohmann::json flash = {
      {"name", "v4-flash"},
      {"layers", 41},
      {"d", 4096},
      {"act_bytes", 2},
      {"active_param_bytes", 13e9},
      {"window_entry_bytes", 584},
      {"window_tokens", 128},
      {"engram_layers", 0},
      {"engram_lookups", 24},
      {"engram_row_bytes", 264},
      {"engram_rows_per_layer", 0},
      {"hbm_GBps", 4800},
      {"host_link_GBps", 64},
      {"gamma", 5},
      {"source",
       "DESIGN 5.5: 21 CSA + 20 HCA layers = 3514 B/token; assumed: d = 4096, 13 GB "
       "active FP8 weights, H200 (4.8 TB/s HBM, 64 GB/s PCIe)"}};
  flash.update(v4_kv(21, 20));
  nlohmann::json pro = flash;
  pro.update({{"name", "v4-pro"},
              {"layers", 61},
              {"d", 7168},
              {"active_param_bytes", 49e9},
              {"source",
               "assumed: 61 layers as 31 CSA + 30 HCA, d = 7168, 49 GB active FP8 "
               "weights, H200"}});
  pro.update(v4_kv(31, 30));
  nlohmann::json v41 = flash;
  v41.update({{"name", "v4.1-flash"},
              {"kv_bytes_per_token", 890.0},
              {"window_entry_bytes", 528},
              {"engram_layers", 2},
              {"engram_rows_per_layer", 384006168},
              {"source",
               "DESIGN 5.2/5.5: CSA2 890 B/token, FP8 window 528 B, Engram at layers "
               "1 and 14 with 384,006,168 rows of 264 B; assumed as v4-flash otherwise"}});
  return nlohmann::json::array({tiny, flash, pro, v41});
}

}  // namespace

Preset parse_preset(const JsonFields& f) {
  f.reject_unknown({"name", "layers", "d", "act_bytes", "active_param_bytes", "kv_bytes_per_token",
                    "kv_v32_bytes_per_token", "window_entry_bytes", "window_tokens",
                    "engram_layers", "engram_lookups", "engram_row_bytes", "engram_rows_per_layer",
                    "hbm_GBps", "host_link_GBps", "gamma", "source"});
  Preset p;
  p.name = f.string("name");
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
  const nlohmann::json all = presets();
  for (const auto& p : all)
    if (p["name"] == name) return parse_preset(JsonFields(p, "builtin:" + name));
  throw_bad_input("--preset: unknown preset '{}' (built in: tiny, v4-flash, v4-pro, v4.1-flash)",
                  name);
}

Preset load_preset(const std::filesystem::path& path) {
  const nlohmann::json j = parse_json(read_file(path, kMaxJsonBytes), path.string());
  return parse_preset(JsonFields(j, path.string()));
}

}  // namespace tandem::sim
