#pragma once
// The end-to-end tiny model as data: its weights as the kernels take them (float tensors of the
// values the reference rounds to; the vocabulary-sized matrices and the experts as seeded
// matrices, generated where they are read), and a run's taps (named intermediate tensors, in
// execution order) with its launches.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/engram_config.hpp"
#include "core/error.hpp"
#include "core/fp8_blocks.hpp"
#include "core/seeded_matrix.hpp"
#include "core/tensor.hpp"
#include "core/vision_config.hpp"  // kUnembedChunkRows
#include "problem/kvcache.hpp"
#include "problem/residual.hpp"  // ResidualSiteWeights
#include "problem/traffic.hpp"

namespace tandem {

// A projection's weights [rows, cols]: held (the DSpark drafter's), or seeded and generated where
// used (the end-to-end model's query and output LoRAs: 42M values for W_qb at 64 heads of 512
// and rank 1280).
struct Projection {
  std::variant<Tensor<float>, SeededMatrix> w;
  // Implicit: a held tensor or a seeded matrix is a projection's weights.
  Projection() = default;
  Projection(Tensor<float> held) : w(std::move(held)) {}
  Projection(SeededMatrix seeded) : w(seeded) {}
  Tensor<float> values() const {
    const auto* s = std::get_if<SeededMatrix>(&w);
    return s ? s->whole() : std::get<Tensor<float>>(w);
  }
  // The held tensor, or null for a seeded projection.
  const Tensor<float>* held() const { return std::get_if<Tensor<float>>(&w); }
  // [rows, cols], without generating a seeded projection.
  Shape shape() const {
    const auto* s = std::get_if<SeededMatrix>(&w);
    return s ? Shape{s->rows, s->cols} : std::get<Tensor<float>>(w).shape;
  }
  // Rows [first, first + count) as floats [count, cols]; BadInput past the rows.
  Tensor<float> row_block(int64_t first, int64_t count) const {
    const Shape s = shape();
    if (s.size() != 2 || first < 0 || count < 0 || first + count > s[0])
      throw BadInput("projection rows [" + std::to_string(first) + ", " +
                     std::to_string(first + count) + ") outside its " +
                     std::to_string(s.empty() ? 0 : s[0]) + " rows");
    if (const auto* seeded = std::get_if<SeededMatrix>(&w)) return seeded->row_block(first, count);
    const Tensor<float>& t = std::get<Tensor<float>>(w);
    const int64_t cols = t.dim(1);
    return Tensor<float>(
        {count, cols},
        std::vector<float>(t.data.begin() + first * cols, t.data.begin() + (first + count) * cols));
  }
};

struct ModelWeights {
  // A block's attention over the compressed cache (DESIGN 5.5, V4.1): H heads of 512 dims with
  // the released query and output LoRAs (core/attention_lora.hpp: rank R_q, G groups of rank
  // R_o), the window's and the compressor's records, the indexer. Tensors of a role the block
  // does not have (core/model_shape.hpp) are empty.
  struct Attention {
    Projection wq_a;                        // [R_q, d]
    Tensor<float> q_norm;                   // [R_q] the latent's RMSNorm gain
    Projection wq_b;                        // [H * 512, R_q]
    Projection wo_a;                        // [G * R_o, H / G * 512]: group g's rows, its heads
    Projection wo_b;                        // [d, G * R_o]
    Tensor<float> sinks;                    // [H]
    Tensor<float> window_wkv, window_norm;  // [512, d], [512]: blocks owning a window
    Tensor<float> comp_wkv, comp_wgate;     // [512, d] each (no gate at r = 1): kv sources
    Tensor<float> comp_norm;                // [512]
    Tensor<float> index_wq, index_w;        // [index heads * 128, R_q], [index heads, d]
    Tensor<float> index_wk, index_norm;     // [128, 512], [128]: index sources
  };
  struct Block {
    ResidualSiteWeights attn_site, ffn_site;  // fn, base, scale, norm_w
    Attention attn;
    Tensor<float> router;                   // [E, d]
    std::vector<float> bias_text, bias_vl;  // [E] (no bias_text at a hash block)
    Tensor<int32_t> tid2eid;                // [V, top_k] at a hash block (ModelShape::hashes)
    // E + 1 x [2 hidden, d] (gate rows, then up rows), E + 1 x [d, hidden]: the routed
    // experts, then the shared one (expert E)
    std::vector<SeededMatrix> w_in, w_out;
  };
  struct EngramLayer {
    int block = 0;
    EngramLayerTables tables;
    std::vector<uint8_t> table;
    // [5d, lookups * head_dim] (629 MB at V4.1's widths: one copy, shared by every copy of the
    // weights), [4, d].
    std::shared_ptr<const Fp8CachedWeight> wkv;
    Tensor<float> gate_w;
  };
  struct Image {
    Tensor<float> patch_w;  // [C, 588]
    Tensor<float> w1, b1;   // aligner: [2d, 9C], [2d]
    Tensor<float> w2, b2;   // [d, 2d], [d]
  };
  SeededMatrix embed, unembed;  // [V, d] each
  Tensor<float> special;        // [4, d] for START..END
  Image image;
  std::vector<Block> blocks;
  std::vector<EngramLayer> engram;
  Tensor<float> head_norm_w;             // [d]
  std::vector<int32_t> compression_map;  // [V] Engram's compressed ids
};

// A model whose verification prompt is text alone (model.prompt_image false) has no image path.
inline constexpr const char* kNoImagePath =
    "model image: this model has no image path (model.prompt_image is false)";

// A prompt as a case runs it: ids (text and the image's layout) and either the image as
// preprocessed patches, embedded by each model on its own (taps image.*), or the IMAGE positions'
// embeddings given directly (float values; none for text).
struct ModelPrompt {
  std::vector<int32_t> ids;
  Tensor<double> visual;  // [IMAGE positions, d] when there are no patches
  Tensor<float> patches;  // [grid_h, grid_w, 588] or empty
};

// Every prompt tensor with its name (the golden blob's tensor names); the patches only when
// given. The weights are not among them: a case regenerates them from its config's seed.
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, ModelPrompt>
void for_each_tensor(Input& p, F&& f) {
  f("ids", p.ids);
  f("visual", p.visual);
  if (!p.patches.data.empty()) f("patches", p.patches);
}

struct ModelTap {
  std::string name;  // as the reference names it: embed, block{b}.attn.y, ..., logits
  Tensor<float> value;
};

// The attention site's taps of block b between .y and .f, in execution order: by role, a window
// owner's records ("block{b}.attn.window": stored values, then ".window.records": the records'
// bytes), a kv source's entries (".entries", ".entries.records"), an index source's index keys
// (".index_keys", ...), its index queries (".index_q", ...) and its selection (".selection");
// then every block's query projection (".q_proj", before the RoPE), RoPE'd queries (".q") and
// attention output (".o", before the output projection).
// The query latent (".q_latent", RMSNorm(W_qa y)) comes after the records and before the
// index queries (their input); the output LoRA's latent (".o_latent") after ".o".
// A tap of no rows (no entry completed in the chunk) is left out.
inline constexpr const char* kRecordsSuffix = ".records";
inline constexpr const char* kSelectionSuffix = ".selection";

// The model's pools: pages of 64 records, the residual's norm eps, room for `records` (at least
// one page).
inline constexpr int64_t kModelKvPage = 64;
inline KvStoreOptions model_store_options(KvFormat f, int64_t records, double norm_eps) {
  return kv_store_options(f, records, kModelKvPage, norm_eps);
}
// Records i of a pool in slot i: the identity page table over `records`.
inline Tensor<int32_t> model_page_table(int64_t records) {
  Tensor<int32_t> t({(records + kModelKvPage - 1) / kModelKvPage});
  for (size_t p = 0; p < t.data.size(); ++p) t.data[p] = int32_t(p);
  return t;
}
// Each token's window: the newest `window` positions up to its own (start + t), oldest first,
// -1 before position 0, as the slots of a ring of `ring_slots` records (position p in slot
// p mod ring_slots; a ring at least as long as the positions keeps slot = position). [T, window]
inline Tensor<int32_t> model_window_indices(int64_t start, int64_t T, int window,
                                            int64_t ring_slots) {
  // A row holds min(window, its position + 1) positions: a shorter ring would alias them.
  if (window < 1 || ring_slots < 1 || ring_slots < std::min<int64_t>(window, start + T))
    throw_bad_input("model window: {} slots cannot hold a window of {} at positions {}..{}",
                    ring_slots, window, start, start + T - 1);
  Tensor<int32_t> idx({T, window});
  for (int64_t t = 0; t < T; ++t)
    for (int i = 0; i < window; ++i) {
      const int64_t p = start + t - (window - 1) + i;
      idx.data[size_t(t * window + i)] = p >= 0 ? int32_t(p % ring_slots) : -1;
    }
  return idx;
}

// The record format of a ".records" tap's stem (".window", ".entries", ".index_keys",
// ".index_q"): V4.1's formats.
inline KvFormat model_record_format(std::string_view records_tap) {
  if (records_tap.find(".index_") != std::string_view::npos) return KvFormat::idx_mxfp4;
  if (records_tap.find(".entries") != std::string_view::npos) return KvFormat::v41_fp4;
  return KvFormat::v41_window;
}

struct ModelRun {
  std::vector<ModelTap> taps;  // in execution order
  LaunchLog launches;          // emu byte counts (empty on cuda)
};

struct ImageRun {
  Tensor<float> visual;  // [tokens_h * tokens_w, d]
  std::vector<ModelTap> taps;
  LaunchLog launches;
};

}  // namespace tandem
