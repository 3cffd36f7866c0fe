#include "sim/traffic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.hpp"
#include "problem/kv_record.hpp"
#include "problem/vision.hpp"
#include "sim/model_traffic.hpp"
#include "sim/residual_traffic.hpp"

namespace tandem::sim {
namespace {

constexpr double kSector = 32;      // bytes per DRAM sector
constexpr int64_t kDsaTopK = 2048;  // V3.2 DSA: entries each decode step selects per layer

double round_up(double bytes, double unit) { return std::ceil(bytes / unit) * unit; }

// Residual stream activation bytes per token for one schedule, all sites.
double residual_bytes(const Preset& p, int elements_per_d) {
  return double(elements_per_d) * p.d * p.act_bytes * 2.0 * p.layers;
}

}  // namespace

void validate_workload(const Workload& w) {
  if (w.batch < 1 || w.batch > (1 << 20)) throw_bad_input("--batch: in [1, 2^20], got {}", w.batch);
  if (w.context < 1 || w.context > (int64_t{1} << 32))
    throw_bad_input("--context: in [1, 2^32], got {}", w.context);
  if (!(w.acceptance >= 0 && w.acceptance < 1))
    throw_bad_input("--acceptance: in [0, 1), got {}", w.acceptance);
  for (double c : w.confidence)
    if (!(c >= 0 && c <= 1)) throw_bad_input("--confidence: values in [0, 1], got {}", c);
  for (const Image& i : w.images)
    if (i.width < 1 || i.height < 1 || i.width > 100000 || i.height > 100000)
      throw_bad_input("--image: sizes in [1, 100000] px, got {}x{}", i.width, i.height);
}

double expected_emitted(const Workload& w, int budget) {
  double e = 1, survival = 1;
  for (int j = 0; j < budget; ++j) {
    survival *= w.confidence.empty() ? w.acceptance
                                     : w.confidence[std::min<size_t>(j, w.confidence.size() - 1)];
    e += survival;
  }
  return e;
}

// Visual tokens of one image with the reference preprocessing geometry (DESIGN 5.3), sized by
// the released image processor's rules (the presets are released models).
VisionImage vision_tokens(const Image& img) {
  const VisionGeometry g = vision_geometry(img.width, img.height, ImageSizing{});
  VisionImage v{img};
  v.grid_w = g.grid_w, v.grid_h = g.grid_h;
  v.tokens_without = g.patches();
  v.tokens_with = g.visual_tokens();
  v.sequence_tokens = g.sequence_tokens();
  return v;
}

namespace {

// The cache layout behind a built-in preset: a release's, or the tiny model's layer mix (the
// end-to-end model the emulator runs: ModelEmu's decode test checks these rows).
std::optional<ReleaseConfig> cache_layout(const Preset& p) {
  if (!p.builtin) return std::nullopt;
  const std::string& name = p.name;
  if (name == "tiny") return model_as_release(builtin_model("tiny"));
  const std::vector<std::string> releases = builtin_release_names();
  if (std::find(releases.begin(), releases.end(), name) == releases.end()) return std::nullopt;
  return builtin_release(name);
}

}  // namespace

Report simulate(const Preset& p, const Workload& w) {
  validate_workload(w);
  Report r;
  r.preset = p;
  r.workload = w;
  r.verify_budget = w.high_load ? 1 : p.gamma;
  r.expected_emitted = expected_emitted(w, r.verify_budget);
  const double E = r.expected_emitted, positions = (r.verify_budget + 1) / E;
  const double sector_row = round_up(p.engram_row_bytes, kSector);
  const double engram_rows = double(p.engram_layers) * p.engram_lookups * sector_row;
  const double engram_dense =
      double(p.engram_layers) * p.engram_rows_per_layer * p.engram_row_bytes;
  const double window = double(p.window_tokens) * p.window_entry_bytes * p.layers;
  // The V3.2 DSA baseline's decode step per layer: the top-2048 selected main records and the
  // indexer's scan of every index key (DESIGN 6).
  const double dsa_read =
      p.layers * (double(std::min<int64_t>(w.context, kDsaTopK)) *
                      kv_format_info(KvFormat::v32_fp8).record_bytes() +
                  double(w.context) * kv_format_info(KvFormat::idx_fp8).record_bytes());
  // The design's decode read: per attention kind for a built-in release or the tiny model's
  // layer mix (window, selected entries, index scan, compressor states); else the whole cache
  // and the window (a preset file does not say how its layers select).
  const std::optional<ReleaseConfig> layout = cache_layout(p);
  const bool release = layout.has_value();
  if (release) {
    r.kv_sequence = release_sequence_bytes(*layout, w.context, kKvReportPage);
    r.kv_decode = release_decode_reads(*layout, w.context);
  }
  double kv_read = w.context * p.kv_bytes_per_token + window;
  std::string kv_read_note =
      fmt::format("design: context {} x KV/token (+ {}-token window)", w.context, p.window_tokens);
  if (release) {
    kv_read = 0;
    for (const KvDecodeRead& k : r.kv_decode) kv_read += double(k.total());
    kv_read_note = "design: window + selected + index scan + states by layer kind (below)";
  }
  const double weights = p.active_param_bytes / w.batch;
  const double residual_base = residual_bytes(p, kResidualV4Unfused);
  const double residual_opt = residual_bytes(p, kResidualV41SinglePass);
  const std::string residual_note =
      fmt::format("20d -> 10d per site x {} sites; V4 norm-folded 14d = {:.0f} B", 2 * p.layers,
                  residual_bytes(p, kResidualV4NormFolded));

  r.prefill = {
      {"residual", residual_base, residual_opt, residual_note},
      {"engram", engram_dense / w.batch, engram_rows,
       fmt::format("{} x {} rows of {} B (sector-rounded {:.0f} B) vs the dense table / batch; "
                   "not in totals",
                   p.engram_layers, p.engram_lookups, p.engram_row_bytes, sector_row),
       false},
      {"kv write", p.kv_v32_bytes_per_token, p.kv_bytes_per_token,
       "V3.2 DSA (656 + 132 B a layer) vs design"},
  };
  r.decode = {
      {"weights", weights, weights / E, fmt::format("active params / batch, / E = {:.3f}", E)},
      {"kv read", dsa_read, kv_read / E,
       fmt::format("DSA: top-{} of 656 B + every 132 B key; {}; / E", kDsaTopK, kv_read_note)},
      {"residual", residual_base, residual_opt * positions,
       fmt::format("{}; x (K+1)/E = {:.3f} positions", residual_note, positions)},
      {"engram", engram_dense / w.batch, engram_rows * positions,
       "rows x (K+1)/E vs the dense table / batch; not in totals", false},
  };
  for (const Image& img : w.images) {
    r.vision.push_back(vision_tokens(img));
    r.vision.back().engram_marker_bytes = double(r.vision.back().sequence_tokens) * engram_rows;
  }

  // Engram prefetch: the first Engram layer's rows for one step must arrive over the host link
  // while the first block runs (its weights and its share of the KV cache, at HBM bandwidth).
  const double first_block_bytes =
      p.active_param_bytes / p.layers + w.batch * w.context * p.kv_bytes_per_token / p.layers;
  r.first_block_ms = first_block_bytes / (p.hbm_GBps * 1e9) * 1e3;
  const double step_rows = p.engram_layers ? w.batch * p.engram_lookups * sector_row : 0;
  r.engram_prefetch_needed_GBps =
      r.first_block_ms > 0 ? step_rows / (r.first_block_ms * 1e-3) / 1e9 : 0;
  r.engram_prefetch_hides = r.engram_prefetch_needed_GBps <= p.host_link_GBps;
  return r;
}

}  // namespace tandem::sim
