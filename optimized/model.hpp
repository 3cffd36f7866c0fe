#pragma once
// The end-to-end tiny model run by the optimized kernels (issue 7a): the same computation as
// reference/model.hpp, orchestrated on the host, one launcher per stage. The V4.1 recipe shift
// is fused where the kernels allow it: between two sublayers one residual_single_pass closes a
// site and opens the next; at an Engram layer the site is closed (residual_post), Engram updates
// the streams, and the next site opens with the carried pre. Activations are f32.
//
// Scope: one prompt from an empty cache (the KV cache of each block is the chunk's own keys and
// values); the image enters as preprocessed patches (the reference's resize, pad and patchify,
// shared by every run: there is no preprocessing kernel).
#include <cstdint>
#include <string>
#include <vector>

#include "core/engram_config.hpp"
#include "core/model_config.hpp"
#include "core/tensor.hpp"
#include "optimized/backend.hpp"
#include "optimized/residual.hpp"
#include "optimized/traffic.hpp"

namespace tandem {

struct ModelWeights {
  struct Block {
    ResidualSiteWeights attn_site, ffn_site;  // fn, base, scale, norm_w
    Tensor<float> wqkv;                       // [3d, d]: wq, wk, wv stacked
    Tensor<float> wo;                         // [d, d]
    Tensor<float> router;                     // [E, d]
    std::vector<float> bias_text, bias_vl;    // [E]
    Tensor<float> w_in, w_out;                // [E, hidden, d], [E, d, hidden]
  };
  struct EngramLayer {
    int block = 0;
    EngramLayerTables tables;
    std::vector<uint8_t> table;
    Tensor<float> wkv, gate_w;  // [5d, lookups * head_dim], [4, d]
  };
  struct Image {
    Tensor<float> patch_w;  // [C, 588]
    Tensor<float> w1, b1;   // aligner: [2d, 9C], [2d]
    Tensor<float> w2, b2;   // [d, 2d], [d]
  };
  Tensor<float> embed, special, unembed;  // [V, d], [4, d] for START..END, [V, d]
  Image image;
  std::vector<Block> blocks;
  std::vector<EngramLayer> engram;
  Tensor<float> head_norm_w;            // [d]
  std::vector<int32_t> compression_map;  // [V] Engram's compressed ids
};

struct ModelTap {
  std::string name;  // as the reference names it: embed, block{b}.attn.y, ..., logits
  Tensor<float> value;
};

struct ModelRun {
  std::vector<ModelTap> taps;  // in execution order
  LaunchLog launches;          // emu byte counts (empty on cuda)
};

// The image path: preprocessed patches [grid_h, grid_w, 588] -> patch embedding (dense_rows) ->
// 3x3 unshuffle (vision_unshuffle; its inverse runs too) -> aligner (dense_rows with bias + GELU,
// then with bias): one embedding per visual token. Taps image.grid, image.tokens, image.embed.
struct ImageRun {
  Tensor<float> visual;  // [tokens_h * tokens_w, d]
  std::vector<ModelTap> taps;
  LaunchLog launches;
};
ImageRun run_image_embedding(const ModelWeights& w, const Tensor<float>& patches,
                             const RunOptions& opt);

// ids: text ids in [0, V) and the image's layout ids (VisionToken); visual: one embedding per
// IMAGE position [IMAGE positions, d], in layout order.
ModelRun run_model(const ModelConfig& m, const ModelWeights& w, const std::vector<int32_t>& ids,
                   const Tensor<float>& visual, const RunOptions& opt);

}  // namespace tandem
