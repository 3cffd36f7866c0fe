#pragma once
// The released models' shapes (DESIGN 5.2, 5.3, 5.5, 5.6) as data: the numbers the traffic
// presets are derived from, and the sizes release-shape verification works at. Built in:
// v4-flash, v4-pro, v4.1-flash; the same JSON form can be loaded from a file.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/engram_config.hpp"
#include "core/json_fields.hpp"

namespace tandem {

// Cache-owning layers of one compression ratio: each token adds (record + index key) / ratio
// persistent bytes per layer (DESIGN 5.5); ratio 0 is window-only (nothing persistent).
struct KvCacheLayers {
  int ratio = 0, layers = 0;
  int record_bytes = 0, index_key_bytes = 0;
};

// How a layer's attention picks the compressed entries a decode step reads (DESIGN 5.5): none
// (window only), every entry (V4 HCA), its own indexer's top-k over every visible key (an index
// source), the last index source's selection (V4.1's other layers), V4.1's candidate scorer
// (layer 20: scans every key, keeps the top candidate blocks and attends its own top-k) and the
// layers that select their top-k inside those blocks (24..36: they scan only the candidates).
enum class KvSelection { window, all, scan, reuse, candidates, in_candidates };
const char* kv_selection_name(KvSelection s);

// Consecutive-or-not layers of one attention kind; ratio 0 is window-only, any other ratio reads
// the cache of that ratio (kv_caches; V4.1's consumers read their source's).
struct AttentionLayers {
  int ratio = 0, layers = 0;
  KvSelection selection = KvSelection::window;
};

struct ReleaseVision {
  int patch = 14, width = 1024, depth = 32, heads = 16, head_dim = 64, mlp_hidden = 2816;
  int downsample = 3;
  int64_t min_pixels = 544 * 544;
  int max_tokens = 1024;
};

struct ReleaseConfig {
  std::string name, source;
  int64_t vocab = 0;
  int hidden = 0, layers = 0, draft_layers = 0;
  int heads = 0, head_dim = 0, rope_dims = 0, q_lora_rank = 0, o_groups = 0, o_rank = 0;
  int routed_experts = 0, shared_experts = 0, top_k = 0, expert_hidden = 0;
  double route_scale = 0;
  // The first num_hash_layers layers route text tokens by ffn.gate.tid2eid [vocab, top_k] (their
  // id's row) and have no ffn.gate.bias (V4's config.json: 3).
  int hash_layers = 0;
  int hc_mult = 4, sinkhorn_iters = 20;
  double hc_eps = 1e-6, norm_eps = 1e-6;
  int fp8_block = 128;  // linears: e4m3 weights, ue8m0 per block x block; activations per block
  int window = 128, window_record_bytes = 0;
  std::vector<KvCacheLayers> kv_caches;
  std::vector<AttentionLayers> attention;  // every layer, by kind
  int index_heads = 0, index_dim = 0, index_top_k = 0;
  // V4.1's candidate blocks: blocks of `index_candidate_block` positions, the top
  // `index_candidate_blocks` of them kept (0 where no layer selects candidates).
  int index_candidate_blocks = 0, index_candidate_block = 0;
  std::optional<EngramConfig> engram;  // the layout (layers, orders, heads, tables, vocabularies)
  std::optional<ReleaseVision> vision;

  // Persistent KV bytes one token adds over all cache-owning layers (DESIGN 5.5).
  double kv_bytes_per_token() const;
  int kv_layers() const;  // layers counted in kv_caches (window-only included)
};

ReleaseConfig parse_release_config(const JsonFields& f);
ReleaseConfig load_release_config(const std::filesystem::path& path);  // BadInput naming it
ReleaseConfig builtin_release(const std::string& name);        // BadInput naming the built-in names
nlohmann::json builtin_release_json(const std::string& name);  // its JSON form
std::vector<std::string> builtin_release_names();

}  // namespace tandem
