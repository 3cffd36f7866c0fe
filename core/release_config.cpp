#include "core/release_config.hpp"

#include <algorithm>
#include <iterator>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace tandem {
namespace {

// DESIGN 5.6's table, 5.5's layer kinds and records, 5.2's Engram layout and 5.3's vision tower.
// V4-Pro's layer list "2 HCA + 29 x (CSA, HCA) + CSA" is 30 CSA + 31 HCA; V4.1's cache owners are
// its kv_source_layers [2, 8, 14, 20]: three r = 2 layers and one r = 1 layer, each with an
// MXFP4 index key (the other layers read their source's cache), and the two window-only layers
// 0-1, which come before any source and keep their own rings. Its attention kinds: layers 0-1
// window-only; 2-19 r = 2 with index sources 2, 8, 14 (the others reuse); 20-39 r = 1, layer 20
// scoring the candidate blocks, 24, 28, 32, 36 selecting inside them, the others reusing.
// num_hash_layers is the released V4 config.json's (3; DESIGN is silent): V4.1 is assumed to keep
// it (its serving code reuses V4's model class, whose gate reads it).
constexpr const char* kReleases = R"json([
{"name": "v4-flash", "source": "DESIGN 5.5, 5.6 (V4-Flash)",
 "vocab": 129280, "hidden": 4096, "layers": 43, "draft_layers": 1,
 "heads": 64, "head_dim": 512, "rope_dims": 64, "q_lora_rank": 1024, "o_groups": 8, "o_rank": 1024,
 "routed_experts": 256, "shared_experts": 1, "top_k": 6, "expert_hidden": 2048, "route_scale": 1.5,
 "num_hash_layers": 3,
 "hc_mult": 4, "sinkhorn_iters": 20, "hc_eps": 1e-6, "norm_eps": 1e-6, "fp8_block": 128,
 "window": 128, "window_record_bytes": 584,
 "kv_caches": [{"ratio": 0, "layers": 2, "record_bytes": 0, "index_key_bytes": 0},
               {"ratio": 4, "layers": 21, "record_bytes": 584, "index_key_bytes": 68},
               {"ratio": 128, "layers": 20, "record_bytes": 584, "index_key_bytes": 0}],
 "attention": [{"ratio": 0, "layers": 2, "selection": "window"},
               {"ratio": 4, "layers": 21, "selection": "scan"},
               {"ratio": 128, "layers": 20, "selection": "all"}],
 "index_heads": 64, "index_dim": 128, "index_top_k": 512
},
{"name": "v4-pro", "source": "DESIGN 5.5, 5.6 (V4-Pro)",
 "vocab": 129280, "hidden": 7168, "layers": 61, "draft_layers": 1,
 "heads": 128, "head_dim": 512, "rope_dims": 64, "q_lora_rank": 1536, "o_groups": 16, "o_rank": 1024,
 "routed_experts": 384, "shared_experts": 1, "top_k": 6, "expert_hidden": 3072, "route_scale": 2.5,
 "num_hash_layers": 3,
 "hc_mult": 4, "sinkhorn_iters": 20, "hc_eps": 1e-6, "norm_eps": 1e-6, "fp8_block": 128,
 "window": 128, "window_record_bytes": 584,
 "kv_caches": [{"ratio": 4, "layers": 30, "record_bytes": 584, "index_key_bytes": 68},
               {"ratio": 128, "layers": 31, "record_bytes": 584, "index_key_bytes": 0}],
 "attention": [{"ratio": 4, "layers": 30, "selection": "scan"},
               {"ratio": 128, "layers": 31, "selection": "all"}],
 "index_heads": 64, "index_dim": 128, "index_top_k": 1024},
{"name": "v4.1-flash", "source": "DESIGN 5.2, 5.3, 5.5, 5.6 (V4.1-Flash)",
 "vocab": 129280, "hidden": 5120, "layers": 40, "draft_layers": 3,
 "heads": 64, "head_dim": 512, "rope_dims": 64, "q_lora_rank": 1280, "o_groups": 8, "o_rank": 1024,
 "routed_experts": 384, "shared_experts": 1, "top_k": 6, "expert_hidden": 2304, "route_scale": 1.5,
 "num_hash_layers": 3,
 "hc_mult": 4, "sinkhorn_iters": 20, "hc_eps": 1e-6, "norm_eps": 1e-20, "fp8_block": 32,
 "window": 128, "window_record_bytes": 528,
 "kv_caches": [{"ratio": 0, "layers": 2, "record_bytes": 0, "index_key_bytes": 0},
               {"ratio": 2, "layers": 3, "record_bytes": 288, "index_key_bytes": 68},
               {"ratio": 1, "layers": 1, "record_bytes": 288, "index_key_bytes": 68}],
 "attention": [{"ratio": 0, "layers": 2, "selection": "window"},
               {"ratio": 2, "layers": 3, "selection": "scan"},
               {"ratio": 2, "layers": 15, "selection": "reuse"},
               {"ratio": 1, "layers": 1, "selection": "candidates"},
               {"ratio": 1, "layers": 4, "selection": "in_candidates"},
               {"ratio": 1, "layers": 15, "selection": "reuse"}],
 "index_heads": 32, "index_dim": 128, "index_top_k": 512,
 "index_candidate_blocks": 2048, "index_candidate_block": 8,
 "engram": {"layer_ids": [1, 14], "max_order": 4, "heads": 8, "head_dim": 256,
            "table_base": 16000000, "vocab": 129280, "compressed_vocab": 99092, "pad_id": 2},
 "vision": {"patch": 14, "width": 1024, "depth": 32, "heads": 16, "head_dim": 64,
            "mlp_hidden": 2816, "downsample": 3, "min_pixels": 295936, "max_tokens": 1024}}
])json";

const nlohmann::json& releases() {
  static const nlohmann::json j = parse_json(kReleases, "builtin releases");
  return j;
}

KvCacheLayers parse_kv_layers(const JsonFields& f) {
  f.reject_unknown({"ratio", "layers", "record_bytes", "index_key_bytes"});
  KvCacheLayers k;
  k.ratio = static_cast<int>(f.integer("ratio", 0, 1 << 20));
  k.layers = static_cast<int>(f.integer("layers", 1, 10000));
  k.record_bytes = static_cast<int>(f.integer("record_bytes", 0, 1 << 20));
  k.index_key_bytes = static_cast<int>(f.integer("index_key_bytes", 0, 1 << 20));
  return k;
}

constexpr const char* kSelectionNames[] = {"window", "all",        "scan",
                                           "reuse",  "candidates", "in_candidates"};

AttentionLayers parse_attention_layers(const JsonFields& f) {
  f.reject_unknown({"ratio", "layers", "selection"});
  AttentionLayers a;
  a.ratio = static_cast<int>(f.integer("ratio", 0, 1 << 20));
  a.layers = static_cast<int>(f.integer("layers", 1, 10000));
  const std::string name = f.string("selection");
  const auto* it = std::find(std::begin(kSelectionNames), std::end(kSelectionNames), name);
  if (it == std::end(kSelectionNames))
    throw_bad_input("{}: window, all, scan, reuse, candidates or in_candidates, got '{}'",
                    f.where("selection"), brief_text(name));
  a.selection = KvSelection(it - std::begin(kSelectionNames));
  return a;
}

// Every layer has one kind; a kind with compressed entries reads a cache of its ratio, with index
// keys where it scans or reuses a selection; a reuser follows an index source of its ratio, a
// layer selecting inside the candidates follows their scorer.
void validate_attention(const ReleaseConfig& r, const JsonFields& f) {
  int layers = 0;
  for (size_t i = 0; i < r.attention.size(); ++i) {
    const AttentionLayers& a = r.attention[i];
    const std::string where = f.element("attention", i).where("selection");
    layers += a.layers;
    if ((a.ratio == 0) != (a.selection == KvSelection::window))
      throw_bad_input("{}: 'window' exactly for ratio 0, got '{}' for ratio {}", where,
                      kv_selection_name(a.selection), a.ratio);
    if (a.ratio == 0) continue;
    const auto cache = std::find_if(r.kv_caches.begin(), r.kv_caches.end(),
                                    [&](const KvCacheLayers& k) { return k.ratio == a.ratio; });
    if (cache == r.kv_caches.end())
      throw_bad_input("{}: no kv_caches entry of ratio {}", where, a.ratio);
    if (a.selection != KvSelection::all && cache->index_key_bytes == 0)
      throw_bad_input("{}: '{}' needs index keys, the ratio-{} cache has none", where,
                      kv_selection_name(a.selection), a.ratio);
    const bool candidates =
        a.selection == KvSelection::candidates || a.selection == KvSelection::in_candidates;
    if (candidates && (r.index_candidate_blocks < 1 || r.index_candidate_block < 1))
      throw_bad_input("{}: '{}' needs index_candidate_blocks and index_candidate_block >= 1", where,
                      kv_selection_name(a.selection));
    const bool source_before =
        std::any_of(r.attention.begin(), r.attention.begin() + i, [&](const AttentionLayers& s) {
          return s.ratio == a.ratio && s.selection != KvSelection::reuse &&
                 s.selection != KvSelection::all;
        });
    if (a.selection == KvSelection::reuse && !source_before)
      throw_bad_input("{}: 'reuse' before any index source of ratio {}", where, a.ratio);
    const bool scorer_before =
        std::any_of(r.attention.begin(), r.attention.begin() + i, [&](const AttentionLayers& s) {
          return s.ratio == a.ratio && s.selection == KvSelection::candidates;
        });
    if (a.selection == KvSelection::in_candidates && !scorer_before)
      throw_bad_input("{}: 'in_candidates' before any 'candidates' layer of ratio {}", where,
                      a.ratio);
  }
  if (layers != r.layers)
    throw_bad_input("{}: {} layers, the model has {}", f.where("attention"), layers, r.layers);
}

ReleaseVision parse_vision(const JsonFields& f) {
  f.reject_unknown({"patch", "width", "depth", "heads", "head_dim", "mlp_hidden", "downsample",
                    "min_pixels", "max_tokens"});
  ReleaseVision v;
  v.patch = static_cast<int>(f.integer("patch", 1, 1024));
  v.width = static_cast<int>(f.integer("width", 1, 1 << 20));
  v.depth = static_cast<int>(f.integer("depth", 1, 10000));
  v.heads = static_cast<int>(f.integer("heads", 1, 4096));
  v.head_dim = static_cast<int>(f.integer("head_dim", 2, 4096));
  v.mlp_hidden = static_cast<int>(f.integer("mlp_hidden", 1, 1 << 20));
  v.downsample = static_cast<int>(f.integer("downsample", 1, 64));
  v.min_pixels = f.integer("min_pixels", 0, int64_t{1} << 40);
  v.max_tokens = static_cast<int>(f.integer("max_tokens", 3, 1 << 20));
  return v;
}

}  // namespace

const char* kv_selection_name(KvSelection s) { return kSelectionNames[int(s)]; }

double ReleaseConfig::kv_bytes_per_token() const {
  double b = 0;
  for (const auto& k : kv_caches)
    if (k.ratio > 0) b += double(k.layers) * (k.record_bytes + k.index_key_bytes) / k.ratio;
  return b;
}

int ReleaseConfig::kv_layers() const {
  int n = 0;
  for (const auto& k : kv_caches) n += k.layers;
  return n;
}

ReleaseConfig parse_release_config(const JsonFields& f) {
  f.reject_unknown({"name",
                    "source",
                    "vocab",
                    "hidden",
                    "layers",
                    "draft_layers",
                    "heads",
                    "head_dim",
                    "rope_dims",
                    "q_lora_rank",
                    "o_groups",
                    "o_rank",
                    "routed_experts",
                    "shared_experts",
                    "top_k",
                    "expert_hidden",
                    "route_scale",
                    "num_hash_layers",
                    "hc_mult",
                    "sinkhorn_iters",
                    "hc_eps",
                    "norm_eps",
                    "fp8_block",
                    "window",
                    "window_record_bytes",
                    "kv_caches",
                    "attention",
                    "index_heads",
                    "index_dim",
                    "index_top_k",
                    "index_candidate_blocks",
                    "index_candidate_block",
                    "engram",
                    "vision"});
  ReleaseConfig r;
  r.name = f.label("name");
  r.source = f.string_or("source", "");
  r.vocab = f.integer("vocab", 1, int64_t{1} << 31);
  r.hidden = static_cast<int>(f.integer("hidden", 1, 1 << 20));
  r.layers = static_cast<int>(f.integer("layers", 1, 10000));
  r.draft_layers = static_cast<int>(f.integer("draft_layers", 0, 64));
  r.heads = static_cast<int>(f.integer("heads", 1, 4096));
  r.head_dim = static_cast<int>(f.integer("head_dim", 1, 1 << 16));
  r.rope_dims = static_cast<int>(f.integer("rope_dims", 0, r.head_dim));
  r.q_lora_rank = static_cast<int>(f.integer("q_lora_rank", 1, 1 << 20));
  r.o_groups = static_cast<int>(f.integer("o_groups", 1, 4096));
  r.o_rank = static_cast<int>(f.integer("o_rank", 1, 1 << 20));
  r.routed_experts = static_cast<int>(f.integer("routed_experts", 1, 1 << 16));
  r.shared_experts = static_cast<int>(f.integer("shared_experts", 0, 64));
  r.top_k = static_cast<int>(f.integer("top_k", 1, r.routed_experts));
  r.expert_hidden = static_cast<int>(f.integer("expert_hidden", 1, 1 << 20));
  r.route_scale = f.number("route_scale", 0, 1e3);
  r.hash_layers = static_cast<int>(f.integer_or("num_hash_layers", 0, 0, r.layers));
  r.hc_mult = static_cast<int>(f.integer("hc_mult", 4, 4));
  r.sinkhorn_iters = static_cast<int>(f.integer("sinkhorn_iters", 1, 1000));
  r.hc_eps = f.number("hc_eps", 0.0, 1e-2);
  r.norm_eps = f.number("norm_eps", 0.0, 1e-2);
  r.fp8_block = static_cast<int>(f.integer("fp8_block", 32, 128));
  if (r.fp8_block != 32 && r.fp8_block != 128)
    throw_bad_input("{}: 32 (V4.1) or 128 (V4), got {}", f.where("fp8_block"), r.fp8_block);
  r.window = static_cast<int>(f.integer("window", 1, 1 << 20));
  r.window_record_bytes = static_cast<int>(f.integer("window_record_bytes", 1, 1 << 20));
  for (size_t i = 0; i < f.array("kv_caches").size(); ++i)
    r.kv_caches.push_back(parse_kv_layers(f.element("kv_caches", i)));
  if (r.kv_layers() > r.layers)
    throw_bad_input("{}: {} cache layers, the model has {}", f.where("kv_caches"), r.kv_layers(),
                    r.layers);
  r.index_heads = static_cast<int>(f.integer("index_heads", 1, 4096));
  r.index_dim = static_cast<int>(f.integer("index_dim", 1, 1 << 16));
  r.index_top_k = static_cast<int>(f.integer("index_top_k", 1, 1 << 20));
  r.index_candidate_blocks =
      static_cast<int>(f.integer_or("index_candidate_blocks", 0, 0, 1 << 24));
  r.index_candidate_block = static_cast<int>(f.integer_or("index_candidate_block", 0, 0, 1 << 16));
  for (size_t i = 0; i < f.array("attention").size(); ++i)
    r.attention.push_back(parse_attention_layers(f.element("attention", i)));
  validate_attention(r, f);
  if (f.has("engram")) {
    const JsonFields e = f.object("engram");
    e.reject_unknown({"layer_ids", "max_order", "heads", "head_dim", "table_base", "vocab",
                      "compressed_vocab", "pad_id"});
    r.engram = parse_engram_layout(e);
  }
  if (f.has("vision")) r.vision = parse_vision(f.object("vision"));
  return r;
}

ReleaseConfig load_release_config(const std::filesystem::path& path) {
  const nlohmann::json j = parse_json(read_file(path, kMaxJsonBytes), path.string());
  return parse_release_config(JsonFields(j, path.string()));
}

std::vector<std::string> builtin_release_names() {
  std::vector<std::string> n;
  for (const auto& r : releases()) n.push_back(r["name"].get<std::string>());
  return n;
}

nlohmann::json builtin_release_json(const std::string& name) {
  for (const auto& r : releases())
    if (r["name"] == name) return r;
  throw_bad_input("unknown release '{}' (built in: v4-flash, v4-pro, v4.1-flash)",
                  brief_text(name));
}

ReleaseConfig builtin_release(const std::string& name) {
  return parse_release_config(JsonFields(builtin_release_json(name), "builtin:" + name));
}

}  // namespace tandem
