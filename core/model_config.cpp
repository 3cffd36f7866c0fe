#include "core/model_config.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "core/atomic_file.hpp"
#include "core/device_limits.hpp"
#include "core/error.hpp"

namespace tandem {
namespace {

// The embedded default model (DESIGN section 8): small enough for the emulator in CI.
constexpr std::string_view kTiny = R"({
  "name": "tiny",
  "seed": 20261202,
  "residual": {"hc_mult": 4, "d": 64, "sinkhorn_iters": 20, "hc_eps": 1e-6, "norm_eps": 1e-6,
               "sites": 4, "tokens": 8},
  "engram": {"layer_ids": [1, 3], "max_order": 4, "heads": 8, "head_dim": 256,
             "table_base": 1000, "vocab": 4096, "compressed_vocab": 3001, "pad_id": 2, "seed": 0,
             "d": 64, "norm_eps": 1e-6, "tokens": 16},
  "vision": {"image_w": 640, "image_h": 480, "width": 32, "heads": 2, "head_dim": 16,
             "experts": 64, "top_k": 6, "text_tokens": 8, "hash_vocab": 4096, "min_pixels": 295936,
             "max_tokens": 1024, "max_wh_ratio": 0},
  "dspark": {"vocab": 257, "backbone_width": 16, "backbone_layers": 4, "width": 32, "blocks": 3,
             "window": 128, "gamma": 5, "markov_rank": 8, "heads": 4, "experts": 4, "top_k": 2,
             "expert_hidden": 64, "noise_id": 256, "requests": 16, "temperature": 1.0},
  "model": {"blocks": 4, "heads": 4, "q_lora_rank": 64, "o_groups": 2, "o_lora_rank": 64,
            "ffn_hidden": 128, "prompt_tokens": 12, "num_hash_layers": 1,
            "compress_ratios": [0, 2, 2, 1], "kv_source_layers": [1, 3],
            "index_source_layers": [1, 3], "window_size": 8, "index_n_heads": 2, "index_topk": 4}
})";

// V4.1-Flash's sizes (DESIGN 5.6) for the components that run one at a time: the residual's
// width and mixing (hc 4, 20 Sinkhorn iterations, its eps), Engram's 24 lookups of 256 at the
// hidden width with tables sized to the test (the primes above 1000, not 16,000,000), the
// attention's 64 heads of 512, the indexer's 32 heads and top-512, the 128-token window, the
// experts' hidden width; DSpark's verification over the release's vocabulary (129,280, noise id
// 128799), its drafter at the release's sizes (3 stages at width 5120 over 3 x 5120 target
// features, 64 heads of 512 with the release's LoRAs 1280 / 8 x 1024, the MoE's 128 routed
// experts of 2304, top-3, one shared, the Markov rank 256, norm epsilon 1e-20, a 128-token window,
// 5 drafts; seeded weights), 2 requests; the decode rows' drafter trained at width 64 with the
// LoRAs' ranks and the backbone at 64 and a Markov rank of 8 (its closed-form training and
// small backbone at 5120 need ~86 GB: past this machine's memory); the vision
// tower's width 1024 and 16 x 64 heads on a 1920x1080 image; the router's 384 experts, top-6
// (the MoE rows materialise the routed ones), its text tokens hashed by a table over the
// vocabulary (a hash layer's gate; the image tokens rank). A few tokens each. The end-to-end model:
// 4 blocks standing for layers 0, 1, 2 and 14 (two window-only, then r = 2 sources, Engram before
// layers 1 and 14; the first three hash-route text tokens: V4's num_hash_layers, assumed for V4.1),
// the release's query and output LoRAs, a 2-token text prompt and 2 decode steps.
constexpr std::string_view kV41Flash = R"({
  "name": "v4.1-flash",
  "seed": 20261205,
  "residual": {"hc_mult": 4, "d": 5120, "sinkhorn_iters": 20, "hc_eps": 1e-6, "norm_eps": 1e-20,
               "sites": 1, "tokens": 2},
  "engram": {"layer_ids": [1, 14], "max_order": 4, "heads": 8, "head_dim": 256,
             "table_base": 1000, "vocab": 129280, "compressed_vocab": 99092, "pad_id": 2,
             "seed": 0, "d": 5120, "norm_eps": 1e-20, "tokens": 2},
  "dspark": {"vocab": 129280, "backbone_width": 5120, "backbone_layers": 4, "width": 5120,
             "blocks": 3, "window": 128, "gamma": 5, "markov_rank": 256, "heads": 64,
             "q_lora_rank": 1280, "o_groups": 8, "o_lora_rank": 1024, "experts": 128, "top_k": 3,
             "expert_hidden": 2304, "noise_id": 128799,
             "norm_eps": 1e-20, "requests": 2, "temperature": 1.0,
             "decode": {"width": 64, "backbone_width": 64, "markov_rank": 8, "q_lora_rank": 64,
                        "o_groups": 8, "o_lora_rank": 64}},
  "vision": {"image_w": 1920, "image_h": 1080, "width": 1024, "heads": 16, "head_dim": 64,
             "experts": 384, "top_k": 6, "text_tokens": 8, "hash_vocab": 129280},
  "model": {"blocks": 4, "layers": [0, 1, 2, 14], "num_hash_layers": 3, "heads": 64,
            "q_lora_rank": 1280,
            "o_groups": 8, "o_lora_rank": 1024, "ffn_hidden": 2304,
            "prompt_tokens": 2, "prompt_image": false, "compress_ratios": [0, 0, 2, 2],
            "kv_source_layers": [2, 3], "index_source_layers": [2, 3], "window_size": 128,
            "index_n_heads": 32, "index_topk": 512}
})";

}  // namespace

ResidualConfig parse_residual_config(const JsonFields& f) {
  f.reject_unknown({"hc_mult", "d", "sinkhorn_iters", "hc_eps", "norm_eps", "sites", "tokens"});
  ResidualConfig c;
  c.hc_mult = static_cast<int>(f.integer("hc_mult", 4, 4));
  c.d = static_cast<int>(f.integer("d", 8, kResidualMaxWidth));
  if (c.d % 8 != 0) throw_bad_input("{}: must be a multiple of 8, got {}", f.where("d"), c.d);
  c.sinkhorn_iters = static_cast<int>(f.integer("sinkhorn_iters", 1, 1000));
  c.hc_eps = f.number("hc_eps", 0.0, 1e-2);
  c.norm_eps = f.number("norm_eps", 0.0, 1e-2);
  c.sites = static_cast<int>(f.integer("sites", 1, 1024));
  c.tokens = static_cast<int>(f.integer("tokens", 1, 1 << 20));
  // Per token and site: 4 streams of d in and out, ~24 x 4d mix coefficients, Sinkhorn on 4x4,
  // the sublayer stand-in's [d, d] row dots; double truth, three float baselines and the
  // kernels' copy: ~8 copies of 8 bytes (the stand-in's weights: its double, float and device
  // copies, ~12 bytes a value).
  const double T = c.tokens, S = c.sites, d = c.d;
  f.within_budget("tokens x sites x d",
                  64 * (T * 4 * d * (2 * S + 2) + S * 100 * d) + 12 * S * d * d,
                  8 * T * S * (100 * d + 16.0 * c.sinkhorn_iters + d * d));
  return c;
}

nlohmann::json to_json(const ResidualConfig& c) {
  return {{"hc_mult", c.hc_mult},
          {"d", c.d},
          {"sinkhorn_iters", c.sinkhorn_iters},
          {"hc_eps", c.hc_eps},
          {"norm_eps", c.norm_eps},
          {"sites", c.sites},
          {"tokens", c.tokens}};
}

namespace {

// The image processor's sizing rules (DESIGN 5.3); absent fields take the release's values.
ImageSizing parse_image_sizing(const JsonFields& f) {
  ImageSizing s;
  // <= 2^32: an upscaled side stays below 2^26 px for any image side <= 2^20.
  s.min_pixels = f.integer_or("min_pixels", s.min_pixels, 0, int64_t{1} << 32);
  // >= 4: the least span, START + one IMAGE + NEWLINE + END, which a one-row canvas fills.
  s.max_tokens = static_cast<int>(f.integer_or("max_tokens", s.max_tokens, 4, 1 << 16));
  // Below 1 a 1-px-high image would be clamped to width 0; above 2^20 it never applies.
  s.max_wh_ratio = f.number_or("max_wh_ratio", s.max_wh_ratio, 0, 1 << 20);
  if (s.max_wh_ratio != 0 && s.max_wh_ratio < 1)
    throw_bad_input("{}: must be 0 (unset) or in [1, 2^20], got {}", f.where("max_wh_ratio"),
                    s.max_wh_ratio);
  return s;
}

}  // namespace

VisionConfig parse_vision_config(const JsonFields& f) {
  f.reject_unknown({"image_w", "image_h", "width", "heads", "head_dim", "experts", "top_k",
                    "text_tokens", "hash_vocab", "min_pixels", "max_tokens", "max_wh_ratio"});
  VisionConfig c;
  c.image_w = static_cast<int>(f.integer("image_w", 1, 1 << 20));
  c.image_h = static_cast<int>(f.integer("image_h", 1, 1 << 20));
  c.width = static_cast<int>(f.integer("width", 8, 1 << 14));
  // The aligner's rows (9 x width) are read in 16-byte packs of bf16 (8 values).
  if (c.width % 8)
    throw_bad_input("{}: must be a multiple of 8 (16-byte bf16 packs), got {}", f.where("width"),
                    c.width);
  c.heads = static_cast<int>(f.integer("heads", 1, 256));
  c.head_dim = static_cast<int>(f.integer("head_dim", 4, 1024));
  if (c.head_dim % 4)
    throw_bad_input("{}: must be a multiple of 4, got {}", f.where("head_dim"), c.head_dim);
  c.experts = static_cast<int>(f.integer("experts", 1, kMoeMaxExperts));
  c.top_k = static_cast<int>(f.integer("top_k", 1, std::min(kMoeMaxTopK, c.experts)));
  c.text_tokens = static_cast<int>(f.integer("text_tokens", 0, 1 << 20));
  c.hash_vocab = static_cast<int>(f.integer_or("hash_vocab", 0, 0, 1 << 24));
  c.sizing = parse_image_sizing(f);
  try {  // the image's sizes: refused here, not when a row runs
    require_content(vision_geometry(c.image_w, c.image_h, c.sizing));
  } catch (const BadInput& e) {
    throw_bad_input("{} x 'image_h' ({}x{}): {}", f.where("image_w"), c.image_w, c.image_h,
                    e.what());
  }
  // The canvas holds at most 9 max_tokens patches of 196 px (h' w' < max_tokens visual tokens
  // of 3x3 patches). The image's bytes, the resampler's passes in double (the horizontal one is
  // at most image + canvas pixels), the canvas and its patches as floats; the gate's logits over
  // experts and the RoPE rows; a patch row is 588 values (14 x 14 x 3).
  // The patch embedding (588 x width a patch, in double) makes each row's input once; the
  // kernels' outputs, the references and the schedules' reruns are ~8 passes over the tokens.
  const double pixels = double(c.image_w) * c.image_h;
  const double patches = 9.0 * c.sizing.max_tokens, canvas = 196 * patches;
  const double tokens = patches + c.text_tokens;
  f.within_budget("image_w x image_h, max_tokens, width, text_tokens x experts, hash_vocab x top_k",
                  pixels * 3 * 9 + canvas * 3 * 24 +
                      64 * tokens * (c.width + c.experts + c.heads * c.head_dim) +
                      8.0 * c.hash_vocab * c.top_k,
                  2 * (pixels + canvas) * 16 + 2 * patches * 588.0 * c.width +
                      8 * tokens * (c.width + c.experts + c.heads * c.head_dim));
  return c;
}

nlohmann::json to_json(const VisionConfig& c) {
  nlohmann::json j = {{"image_w", c.image_w},
                      {"image_h", c.image_h},
                      {"width", c.width},
                      {"heads", c.heads},
                      {"head_dim", c.head_dim},
                      {"experts", c.experts},
                      {"top_k", c.top_k},
                      {"text_tokens", c.text_tokens},
                      {"min_pixels", c.sizing.min_pixels},
                      {"max_tokens", c.sizing.max_tokens},
                      {"max_wh_ratio", c.sizing.max_wh_ratio}};
  if (c.hash_vocab) j["hash_vocab"] = c.hash_vocab;  // absent: every token ranks (older files)
  return j;
}

namespace {

// The drafter's widths: its own, the backbone's (the features'), the Markov rank and the LoRAs
// (the section's, or its "decode" object's).
DsparkDecodeSizes parse_drafter_sizes(const JsonFields& f, int heads) {
  DsparkDecodeSizes s;
  s.backbone_width = static_cast<int>(
      f.integer("backbone_width", kDsparkBackboneWidthStep, kDsparkMaxBackboneWidth));
  if (s.backbone_width % kDsparkBackboneWidthStep)
    throw_bad_input("{}: must be a multiple of {} (main_proj reads 3 x it in float packs), got {}",
                    f.where("backbone_width"), kDsparkBackboneWidthStep, s.backbone_width);
  s.width = static_cast<int>(f.integer("width", kDsparkWidthStep, kDsparkMaxWidth));
  if (s.width % kDsparkWidthStep)
    throw_bad_input("{}: must be a multiple of {} (the window store's bf16 packs), got {}",
                    f.where("width"), kDsparkWidthStep, s.width);
  s.markov_rank = static_cast<int>(f.integer("markov_rank", 1, kMarkovMaxRank));
  s.lora = parse_attention_lora(f, heads);
  return s;
}

}  // namespace

DsparkConfig parse_dspark_config(const JsonFields& f) {
  f.reject_unknown({"vocab",    "backbone_width", "backbone_layers", "width",         "blocks",
                    "window",   "gamma",          "markov_rank",     "requests",      "temperature",
                    "heads",    "experts",        "top_k",           "expert_hidden", "noise_id",
                    "norm_eps", "q_lora_rank",    "o_groups",        "o_lora_rank",   "decode"});
  DsparkConfig c;
  c.vocab = static_cast<int>(f.integer("vocab", 2, 1 << 20));
  c.backbone_layers = static_cast<int>(f.integer("backbone_layers", 3, 64));
  c.blocks = static_cast<int>(f.integer("blocks", 1, 64));
  c.window = static_cast<int>(f.integer("window", 1, 1 << 20));
  c.gamma = static_cast<int>(f.integer("gamma", 1, kDsparkMaxDraft));
  c.requests = static_cast<int>(f.integer("requests", 1, 1 << 16));
  c.temperature = f.number("temperature", 1e-3, 1e3);
  // The released stages' attention and MoE (DESIGN 5.4 "As released"); the defaults are the tiny
  // drafter's, the noise id the vocabulary's last.
  c.heads = static_cast<int>(f.integer_or("heads", c.heads, kDsparkHeadStep, kDsparkMaxHeads));
  if (c.heads % kDsparkHeadStep)
    throw_bad_input("{}: must be a multiple of {} (sparse attention's head group), got {}",
                    f.where("heads"), kDsparkHeadStep, c.heads);
  const DsparkDecodeSizes own = parse_drafter_sizes(f, c.heads);
  c.width = own.width, c.backbone_width = own.backbone_width, c.markov_rank = own.markov_rank;
  c.lora = own.lora;
  if (f.has("decode")) {
    const JsonFields d = f.object("decode");
    d.reject_unknown(
        {"width", "backbone_width", "markov_rank", "q_lora_rank", "o_groups", "o_lora_rank"});
    c.decode = parse_drafter_sizes(d, c.heads);
  }
  // The stages' MoE runs on the model's gate and experts kernels: their limits.
  c.experts = static_cast<int>(f.integer_or("experts", c.experts, 1, kMoeMaxExperts));
  c.top_k = static_cast<int>(
      f.integer_or("top_k", std::min(c.top_k, c.experts), 1, std::min(kMoeMaxTopK, c.experts)));
  c.expert_hidden = static_cast<int>(
      f.integer_or("expert_hidden", c.expert_hidden, kMoeHiddenStep, kMoeMaxHidden));
  if (c.expert_hidden % kMoeHiddenStep)
    throw_bad_input("{}: must be a multiple of {} (the experts kernel's packs), got {}",
                    f.where("expert_hidden"), kMoeHiddenStep, c.expert_hidden);
  c.noise_id = static_cast<int>(f.integer_or("noise_id", c.vocab - 1, 0, c.vocab - 1));
  c.norm_eps = f.number_or("norm_eps", c.norm_eps, 0, 1e-2);
  // Verification holds [R, 2K + 1, V] distributions (float, and the reference's copies); decode
  // runs 24 passes of every request: the backbone over K + 1 tokens (vocab-wide heads), one
  // drafter pass over the decode's context. The trained drafter's row runs a pass after window +
  // 6 tokens on the kernels (and under 3 other schedules), in truth and baseline, and at most 31
  // more baseline draws where a tolerance check fails. With decode sizes, a second drafter row
  // runs the section's seeded drafter after kDsparkSeededContext positions the same 6 ways (its
  // widening draws, where a tolerance fails, are not counted: as the end-to-end model's); its
  // budget is its own (rows run one at a time on a host thread).
  const DsparkConfig dc = dspark_decode_config(c);
  const double R = c.requests, K = c.gamma, V = c.vocab;
  const double per_token = V * (dc.backbone_width + 2.0 * dc.markov_rank) +
                           dc.backbone_layers * 4.0 * dc.backbone_width * dc.backbone_width;
  // The decode rows share one drafter, trained once on dspark_training_prompts 6-token prompts
  // without the held-out set.
  const DsparkTrainingCost training = dspark_training_cost(
      dc, dspark_training_prompts(dc), kDsparkTrainingPromptTokens, kDsparkTrainingSteps, false);
  f.within_budget(
      "requests x gamma x vocab, widths, window, experts, the drafter's training",
      32 * R * (2 * K + 1) * V + 8 * (per_token + R * dc.window * 3.0 * dc.backbone_width) +
          dspark_drafter_bytes(dc, true) + training.bytes,
      24 * R *
              (4 * (K + 1) * per_token +
               dspark_pass_work(dc, kDsparkTrainingPromptTokens + kDsparkTrainingSteps)) +
          training.work + 37 * dspark_pass_work(dc, dc.window + 6));
  if (c.decode)  // the seeded drafter's row, on its own
    f.within_budget("width, backbone_width, markov_rank, heads, experts (the seeded drafter row)",
                    dspark_drafter_bytes(c, false), 6 * dspark_pass_work(c, kDsparkSeededContext));
  return c;
}

AttentionLora parse_attention_lora(const JsonFields& f, int heads) {
  AttentionLora a;
  // The query LoRA's norm runs residual_rmsnorm over rows of q_lora_rank (its 16-byte bf16 packs).
  a.q_rank = static_cast<int>(f.integer_or("q_lora_rank", a.q_rank, 8, kResidualMaxWidth));
  if (a.q_rank % 8)
    throw_bad_input("{}: must be a multiple of 8 (the query LoRA norm's packs), got {}",
                    f.where("q_lora_rank"), a.q_rank);
  a.o_groups = static_cast<int>(f.integer_or("o_groups", a.o_groups, 1, heads));
  if (heads % a.o_groups)
    throw_bad_input("{}: {} groups do not divide the {} heads", f.where("o_groups"), a.o_groups,
                    heads);
  // wo_b stages a token's o_groups x o_lora_rank inputs in shared memory (dense_rows).
  constexpr int64_t kStagedFloats = int64_t(kMaxDynamicShared / sizeof(float));
  a.o_rank = static_cast<int>(f.integer_or("o_lora_rank", a.o_rank, 8, kStagedFloats));
  if (a.o_rank % 8 || int64_t{a.o_groups} * a.o_rank > kStagedFloats)
    throw_bad_input(
        "{}: must be a multiple of 8 with o_groups x it at most {} (the inputs dense_rows stages), "
        "got {} x {}",
        f.where("o_lora_rank"), kStagedFloats, a.o_groups, a.o_rank);
  return a;
}

void put_attention_lora(nlohmann::json& j, const AttentionLora& a) {
  j["q_lora_rank"] = a.q_rank, j["o_groups"] = a.o_groups, j["o_lora_rank"] = a.o_rank;
}

nlohmann::json to_json(const DsparkConfig& c) {
  nlohmann::json j = {{"vocab", c.vocab},
                      {"backbone_width", c.backbone_width},
                      {"backbone_layers", c.backbone_layers},
                      {"width", c.width},
                      {"blocks", c.blocks},
                      {"window", c.window},
                      {"gamma", c.gamma},
                      {"markov_rank", c.markov_rank},
                      {"heads", c.heads},
                      {"experts", c.experts},
                      {"top_k", c.top_k},
                      {"expert_hidden", c.expert_hidden},
                      {"noise_id", c.noise_id},
                      {"norm_eps", c.norm_eps},
                      {"requests", c.requests},
                      {"temperature", c.temperature}};
  put_attention_lora(j, c.lora);
  if (c.decode) {
    nlohmann::json d = {{"width", c.decode->width},
                        {"backbone_width", c.decode->backbone_width},
                        {"markov_rank", c.decode->markov_rank}};
    put_attention_lora(d, c.decode->lora);
    j["decode"] = d;
  }
  return j;
}

namespace {

// An array of integers in [lo, hi], at most `max` of them.
std::vector<int> int_list(const JsonFields& f, const char* key, int lo, int hi, size_t max) {
  const nlohmann::json& a = f.array(key);
  if (a.size() > max) throw_bad_input("{}: {} entries, at most {}", f.where(key), a.size(), max);
  std::vector<int> v;
  for (const nlohmann::json& e : a) {
    if (!e.is_number_integer() || e.get<int64_t>() < lo || e.get<int64_t>() > hi)
      throw_bad_input("{}: entries are integers in [{}, {}], got {}", f.where(key), lo, hi,
                      brief(e));
    v.push_back(e.get<int>());
  }
  return v;
}

// Ascending distinct blocks, each compressing.
void require_compressing_blocks(const JsonFields& f, const char* key, const std::vector<int>& v,
                                const std::vector<int>& ratios) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0 && v[i] <= v[i - 1])
      throw_bad_input("{}: blocks must be ascending and distinct, got {} after {}", f.where(key),
                      v[i], v[i - 1]);
    if (ratios[size_t(v[i])] == 0)
      throw_bad_input("{}: block {} is window-only (compress_ratios[{}] = 0)", f.where(key), v[i],
                      v[i]);
  }
}

}  // namespace

bool ModelShape::is_kv_source(int b) const {
  return std::ranges::find(kv_source_layers, b) != kv_source_layers.end();
}
bool ModelShape::is_index_source(int b) const {
  return std::ranges::find(index_source_layers, b) != index_source_layers.end();
}
int ModelShape::kv_source(int b) const {
  if (compress_ratios[size_t(b)] == 0) return b;
  int source = -1;
  for (int s : kv_source_layers)
    if (s <= b) source = s;
  return source;
}
int ModelShape::block_of_layer(int layer) const {
  const auto it = std::ranges::find(layers, layer);
  return it == layers.end() ? -1 : int(it - layers.begin());
}
int ModelShape::index_source(int b) const {
  if (compress_ratios[size_t(b)] == 0) return -1;
  int source = -1;
  for (int s : index_source_layers)
    if (s <= b) source = s;
  return source;
}

ModelShape parse_model_shape(const JsonFields& f) {
  f.reject_unknown({"blocks", "heads", "ffn_hidden", "prompt_tokens", "prompt_image",
                    "compress_ratios", "kv_source_layers", "index_source_layers", "window_size",
                    "index_n_heads", "index_topk", "layers", "num_hash_layers", "q_lora_rank",
                    "o_groups", "o_lora_rank"});
  ModelShape s;
  s.blocks = static_cast<int>(f.integer("blocks", 3, 256));
  // Sparse attention runs heads in groups of 4 (problem/sparse_attn.hpp).
  s.heads = static_cast<int>(f.integer("heads", 4, 128));
  if (s.heads % 4)
    throw_bad_input("{}: must be a multiple of 4 (sparse attention's head groups), got {}",
                    f.where("heads"), s.heads);
  s.lora = parse_attention_lora(f, s.heads);
  // The expert kernel reads hidden rows with 16-byte loads and stages them in shared memory.
  s.ffn_hidden = static_cast<int>(f.integer("ffn_hidden", 4, 16384));
  if (s.ffn_hidden % 4)
    throw_bad_input("{}: must be a multiple of 4 (16-byte expert rows), got {}",
                    f.where("ffn_hidden"), s.ffn_hidden);
  s.prompt_tokens = static_cast<int>(f.integer("prompt_tokens", 1, 1 << 16));
  s.prompt_image = !f.has("prompt_image") || f.boolean("prompt_image");
  s.layers.resize(size_t(s.blocks));
  std::iota(s.layers.begin(), s.layers.end(), 0);
  if (f.has("layers")) {
    s.layers = int_list(f, "layers", 0, 1023, 256);
    if (s.layers.size() != size_t(s.blocks))
      throw_bad_input("{}: {} layers for {} blocks", f.where("layers"), s.layers.size(), s.blocks);
    for (size_t i = 1; i < s.layers.size(); ++i)
      if (s.layers[i] <= s.layers[i - 1])
        throw_bad_input("{}: layers must be ascending and distinct, got {} after {}",
                        f.where("layers"), s.layers[i], s.layers[i - 1]);
  }
  s.hash_layers = static_cast<int>(f.integer_or("num_hash_layers", 0, 0, 1024));
  s.compress_ratios = int_list(f, "compress_ratios", 0, 2, 256);
  if (s.compress_ratios.size() != size_t(s.blocks))
    throw_bad_input("{}: {} ratios for {} blocks", f.where("compress_ratios"),
                    s.compress_ratios.size(), s.blocks);
  s.kv_source_layers = int_list(f, "kv_source_layers", 0, s.blocks - 1, 256);
  s.index_source_layers = int_list(f, "index_source_layers", 0, s.blocks - 1, 256);
  require_compressing_blocks(f, "kv_source_layers", s.kv_source_layers, s.compress_ratios);
  require_compressing_blocks(f, "index_source_layers", s.index_source_layers, s.compress_ratios);
  for (int b = 0; b < s.blocks; ++b) {
    const int r = s.compress_ratios[size_t(b)];
    if (r == 0) continue;
    const int source = s.kv_source(b), selector = s.index_source(b);
    if (source < 0)
      throw_bad_input("{}: block {} compresses but no kv source comes at or before it",
                      f.where("kv_source_layers"), b);
    if (s.compress_ratios[size_t(source)] != r)
      throw_bad_input("{}: block {} (ratio {}) would read block {}'s cache (ratio {})",
                      f.where("compress_ratios"), b, r, source, s.compress_ratios[size_t(source)]);
    if (selector < 0 || s.kv_source(selector) != source)
      throw_bad_input(
          "{}: block {} needs an index source at or before it that reads its cache (block {}'s)",
          f.where("index_source_layers"), b, source);
  }
  // The window's indices and the selection are one sparse attention index list per token.
  s.window = static_cast<int>(f.integer("window_size", 1, 1024));
  s.index_heads = static_cast<int>(f.integer("index_n_heads", 1, 64));
  s.index_topk = static_cast<int>(f.integer("index_topk", 1, 2048));
  return s;
}

nlohmann::json to_json(const ModelShape& s) {
  nlohmann::json j = {{"blocks", s.blocks},
                      {"heads", s.heads},
                      {"ffn_hidden", s.ffn_hidden},
                      {"prompt_tokens", s.prompt_tokens},
                      {"compress_ratios", s.compress_ratios},
                      {"kv_source_layers", s.kv_source_layers},
                      {"index_source_layers", s.index_source_layers},
                      {"window_size", s.window},
                      {"index_n_heads", s.index_heads},
                      {"index_topk", s.index_topk}};
  // Defaults are left out: a config written before these fields reads back the same.
  std::vector<int> identity(s.layers.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (s.layers != identity) j["layers"] = s.layers;
  if (!s.prompt_image) j["prompt_image"] = false;
  if (s.hash_layers) j["num_hash_layers"] = s.hash_layers;
  put_attention_lora(j, s.lora);
  return j;
}

namespace {

// The end-to-end model joins every section: they must agree, and one forward must fit the
// budget.
void check_end_to_end(const ModelConfig& m, const JsonFields& f) {
  // Its output projection (dense_rows) stages a token's heads x 512 inputs in shared memory.
  if (size_t(m.shape.heads) * 512 * sizeof(float) > kMaxDynamicShared)
    throw_bad_input(
        "{}: {} heads of 512 dims are {} inputs to the end-to-end model's output projection, "
        "which stages at most {} in shared memory",
        f.where("model.heads"), m.shape.heads, m.shape.heads * 512,
        kMaxDynamicShared / sizeof(float));
  if (m.engram.d != m.residual.d)
    throw_bad_input("{}: {} where residual.d is {} (Engram writes the residual streams)",
                    f.where("engram.d"), m.engram.d, m.residual.d);
  for (int id : m.engram.layer_ids)
    if (m.shape.block_of_layer(id) < 0)
      throw_bad_input("{}: layer {} but the model's {} blocks stand for layers {}",
                      f.where("engram.layer_ids"), id, m.shape.blocks,
                      fmt::join(m.shape.layers, ", "));
}

void check_end_to_end_budget(const ModelConfig& m, const JsonFields& f) {
  // One forward of the end-to-end prompt (its tokens and the image's, ~200) through every block:
  // the projections (the query and output LoRAs, the window's and the compressor's records, the
  // indexer's queries from the query latent and its weights), the indexer's scan, sparse
  // attention over the window and the selection, the MoE's chosen experts, the unembedding.
  const double T = double(verification_prompt_tokens(m)), d = m.residual.d;
  const double H = m.shape.heads, ih = m.shape.index_heads;
  const double attention = attention_projection_values(m.shape.lora, m.shape.heads, m.residual.d) +
                           3 * 512 * d + ih * (128.0 * m.shape.lora.q_rank + d) + T * ih * 128 +
                           H * 512 * (m.shape.window + m.shape.index_topk);
  const double per_token = m.shape.blocks * (attention + m.vision.experts * d +
                                             3.0 * m.vision.top_k * m.shape.ffn_hidden * d) +
                           2.0 * m.engram.vocab * d;
  f.within_budget("model.prompt_tokens x model.blocks x residual.d", 0, T * per_token);
}

}  // namespace

int64_t verification_prompt_tokens(const ModelConfig& m) {
  if (!m.shape.prompt_image) return m.shape.prompt_tokens;
  const VisionGeometry g = vision_geometry(m.vision.image_w, m.vision.image_h, m.vision.sizing);
  return m.shape.prompt_tokens + g.sequence_tokens();
}

bool ModelConfig::has(std::string_view section) const {
  return std::find(sections.begin(), sections.end(), section) != sections.end();
}

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source,
                               const std::vector<std::string>& sections) {
  const JsonFields f(j, source);
  f.reject_unknown({"name", "seed", "residual", "engram", "vision", "dspark", "model"});
  ModelConfig m;
  m.name = f.label("name");
  m.seed = f.unsigned_integer("seed");
  for (const std::string& s : sections)
    if (std::find(kModelSections.begin(), kModelSections.end(), s) == kModelSections.end())
      throw_bad_input("{}: no config section '{}'", source, s);
  m.sections.clear();
  for (const std::string& s : kModelSections)  // in the config's order, each once
    if (std::find(sections.begin(), sections.end(), s) != sections.end()) m.sections.push_back(s);
  if (m.has("residual")) m.residual = parse_residual_config(f.object("residual"));
  if (m.has("engram")) m.engram = parse_engram_config(f.object("engram"));
  if (m.has("vision")) m.vision = parse_vision_config(f.object("vision"));
  if (m.has("dspark")) m.dspark = parse_dspark_config(f.object("dspark"));
  if (m.has("model")) m.shape = parse_model_shape(f.object("model"));
  // Sections read together must agree where a component joins them; a section read alone is
  // validated on its own (a release-shape config runs one component at its size).
  const auto read = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* n) { return m.has(n); });
  };
  const bool every = read({"residual", "engram", "model", "vision"});
  if (every) check_end_to_end(m, f);
  // The attention component's row splits residual.d into model.heads heads.
  if (read({"residual", "model"}) && m.residual.d % m.shape.heads)
    throw_bad_input("{}: {} heads do not divide residual.d = {}", f.where("model.heads"),
                    m.shape.heads, m.residual.d);
  if (every) check_end_to_end_budget(m, f);
  const double d = m.residual.d, tokens = m.residual.tokens;
  if (read({"residual", "model", "vision"})) {
    // The MoE row: the materialised experts' three [H, d] matrices (every expert, or the routed
    // ones of a large table: cases/moe_case.hpp) as floats in the row and one copy at a time (a
    // baseline's permuted copy, or the kernels' device copy while they run); each token through
    // its top-k experts; truth, baselines and the emulator's schedules: ~8 runs.
    const double k = m.vision.top_k, hidden = m.shape.ffn_hidden;
    const double E =
        moe_materialises_every_expert(m.vision.experts, m.shape.ffn_hidden, m.residual.d)
            ? m.vision.experts
            : std::min<double>(m.vision.experts, tokens * k);
    f.within_budget(
        "vision.experts x model.ffn_hidden x residual.d, residual.tokens x vision.top_k",
        8 * E * 3 * hidden * d + 64 * tokens * (d + k * hidden), 8 * tokens * k * 3 * hidden * d);
  }
  if (read({"residual", "engram"})) {
    // The attention row: residual.tokens queries over engram.tokens cached positions and
    // themselves.
    const double P = m.engram.tokens;
    f.within_budget("residual.tokens x engram.tokens x residual.d",
                    64 * (2 * (tokens + P) * d + tokens * d), 8 * tokens * (tokens + P) * 2 * d);
  }
  if (read({"residual", "model"})) {
    // The dense rows: W [3d, d] (q/k/v) or [model.ffn_hidden, d] in the row (double truth,
    // floats, a baseline's and the kernels' copies: ~12 bytes a value, 5.4 GB measured at d
    // 12288), each token through it in ~8 runs.
    const double n_out = std::max(3 * d, double(m.shape.ffn_hidden));
    f.within_budget("residual.d x model.ffn_hidden (the dense rows)", 12 * n_out * d,
                    8 * tokens * n_out * d);
    // The queries' RoPE rows: residual.tokens tokens of model.heads 512-dim queries (f32 in, bf16
    // out, truth, baseline and the schedules' copies: ~64 bytes a value).
    f.within_budget("residual.tokens x model.heads", 64 * tokens * m.shape.heads * 512.0,
                    8 * tokens * m.shape.heads * 512.0);
    // The indexer's candidates row: residual.tokens rows of scores over kCandidateRowPositions
    // and the tokens (two layers' scores, lengths, the blocks and the selection, the reference's
    // copies and the schedules' reruns: ~64 bytes a score), five radix passes a row.
    const double scores = tokens * (double(kCandidateRowPositions) + tokens);
    f.within_budget("residual.tokens x the candidates row's 36,864 positions", 64 * scores,
                    8 * 5 * scores);
  }
  return m;
}

nlohmann::json to_json(const ModelConfig& m) {
  nlohmann::json j = {{"name", m.name}, {"seed", m.seed}};
  if (m.has("residual")) j["residual"] = to_json(m.residual);
  if (m.has("engram")) j["engram"] = to_json(m.engram);
  if (m.has("vision")) j["vision"] = to_json(m.vision);
  if (m.has("dspark")) j["dspark"] = to_json(m.dspark);
  if (m.has("model")) j["model"] = to_json(m.shape);
  return j;
}

nlohmann::json load_model_json(const std::filesystem::path& path) {
  return parse_json(read_file(path, kMaxJsonBytes), path.string());
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  return parse_model_config(load_model_json(path), path.string());
}

nlohmann::json builtin_model_json(std::string_view name) {
  if (name == "tiny") return parse_json(kTiny, "builtin:tiny");
  if (name == "v4.1-flash") return parse_json(kV41Flash, "builtin:v4.1-flash");
  throw_bad_input("--model: unknown built-in model '{}' (known: tiny, v4.1-flash)", name);
}

ModelConfig builtin_model(std::string_view name, const std::vector<std::string>& sections) {
  const nlohmann::json j = builtin_model_json(name);
  return parse_model_config(j, "builtin:" + std::string(name),
                            sections.empty() ? model_sections_of(j) : sections);
}

std::vector<std::string> model_sections_of(const nlohmann::json& j) {
  std::vector<std::string> present;
  for (const std::string& s : kModelSections)
    if (j.is_object() && j.contains(s)) present.push_back(s);
  return present;
}

}  // namespace tandem
