#pragma once
// The analytic memory-traffic model (DESIGN section 6): bytes per prefill token and per
// generated token, by component, baseline vs optimized, for a preset and a workload.
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/json_fields.hpp"
#include "sim/kvcache_traffic.hpp"

namespace tandem::sim {

struct Preset {
  std::string name;
  int layers = 0;                     // transformer blocks; 2 residual sites each
  int d = 0;                          // hidden width per residual stream
  int act_bytes = 2;                  // residual storage element (bf16)
  double active_param_bytes = 0;      // weights one decode step reads (shared by the batch)
  double kv_bytes_per_token = 0;      // the design's global KV cache, all layers (DESIGN 5.5)
  double kv_v32_bytes_per_token = 0;  // baseline: V3.2 DSA, (656 + 132) B x layers
  double window_entry_bytes = 0;      // sliding-window KV entry
  int window_tokens = 128;
  int engram_layers = 0;       // layers with Engram (DESIGN 5.2)
  int engram_lookups = 24;     // per token per Engram layer
  int engram_row_bytes = 264;  // 256 e4m3 + 8 ue8m0
  int64_t engram_rows_per_layer = 0;
  double hbm_GBps = 4800;      // device memory bandwidth
  double host_link_GBps = 64;  // host -> device (Engram prefetch)
  int gamma = 5;               // DSpark draft length
  std::string source;          // where the numbers come from
  // Set by builtin_preset only: the decode read and per-sequence bytes follow the built-in
  // release's cache layout (or the tiny model's layer mix); a preset file's never do, whatever
  // its name.
  bool builtin = false;
};

struct Image {
  int width = 0, height = 0;  // pixels
};

struct Workload {
  int batch = 1;
  int64_t context = 4096;
  std::vector<Image> images;
  double acceptance = 0.7;         // i.i.d. DSpark acceptance per drafted token
  std::vector<double> confidence;  // or a per-position confidence profile (overrides acceptance)
  std::string acceptance_from;     // where a measured profile came from (empty: given by hand)
  bool high_load = true;           // high: verify 1 candidate per request; low: all gamma
};

struct ComponentBytes {
  std::string component;
  double baseline = 0, optimized = 0;
  std::string note;
  bool in_total = true;  // false for a reference figure (Engram's dense equivalent)
  double saving() const { return optimized > 0 ? baseline / optimized : 0; }
};

struct VisionImage {
  Image input;
  int grid_w = 0, grid_h = 0;                   // 14-px patches after preprocessing
  int64_t tokens_without = 0, tokens_with = 0;  // visual tokens without / with 3x3 unshuffle
  int64_t sequence_tokens = 0;                  // 2 + h'(w' + 1) with START/NEWLINE/END
  // Engram rows the release fetches at the image's positions (the all-pad n-gram, gate 0):
  // what engram.skip_marker_lookups saves in prefill.
  double engram_marker_bytes = 0;
};

struct Report {
  Preset preset;
  Workload workload;
  std::vector<ComponentBytes> prefill, decode;  // per prefill token / per generated token
  double expected_emitted = 1;                  // E[tokens per verify step]
  int verify_budget = 1;                        // K
  double engram_prefetch_needed_GBps = 0, first_block_ms = 0;
  bool engram_prefetch_hides = true;
  std::vector<VisionImage> vision;
  // One sequence of `context` tokens in the cache, for presets that are a built-in release
  // (sim/kvcache_traffic.hpp; pages of kKvReportPage records).
  std::optional<KvSequenceBytes> kv_sequence;
  // What a decode step at `context` reads from that cache, by attention kind (the "kv read"
  // row's design side for those presets).
  std::vector<KvDecodeRead> kv_decode;
};
inline constexpr int64_t kKvReportPage = 64;

Preset builtin_preset(const std::string& name);  // tiny, v4-flash, v4-pro, v4.1-flash
std::vector<std::string> builtin_preset_names();
Preset parse_preset(const JsonFields& f);
Preset load_preset(const std::filesystem::path& path);
void validate_workload(const Workload& w);

// E[emitted per step] for verify budget K: 1 + sum_{j<=K} prod_{i<=j} c_i (i.i.d.: c_i = a; a
// confidence profile shorter than K repeats its last value: c_i = c_n for i > n).
double expected_emitted(const Workload& w, int budget);
VisionImage vision_tokens(const Image& img);
Report simulate(const Preset& p, const Workload& w);

nlohmann::json to_json(const Report& r);
std::string to_table(const Report& r);
std::string to_csv(const Report& r);
// What write_outputs leaves in its directory.
inline constexpr const char* kReportFiles[] = {
    "report.json",         "report.csv",          "sweep.csv",          "traffic_stacked.svg",
    "traffic_stacked.png", "traffic_savings.svg", "traffic_savings.png"};
// Writes report.json, report.csv, sweep.csv and gnuplot plots (SVG and PNG) of bytes per
// generated token vs context, stacked by component, and the savings, into `dir`. All of them are
// made in a private temporary directory inside `dir` and moved in only when every one was made:
// a failure leaves `dir` as it was (a crash between two moves can leave a subset of the new
// files beside the old ones, each file whole). Stale temporaries of killed runs are removed.
void write_outputs(const Report& r, const std::filesystem::path& dir);
// `text` as a gnuplot double-quoted string that gnuplot reads back verbatim: every byte that is
// not a letter, digit, space or one of "-_.," becomes an octal escape, so backquotes (command
// substitution), '@' (macros), quotes, backslashes and newlines are inert.
std::string gnuplot_string(std::string_view text);

}  // namespace tandem::sim
