#pragma once
// The end-to-end tiny model as data: its weights as the kernels take them (float tensors of the
// values the reference rounds to), and a run's taps (named intermediate tensors, in execution
// order) with its launches.
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/engram_config.hpp"
#include "core/tensor.hpp"
#include "problem/residual.hpp"  // ResidualSiteWeights
#include "problem/traffic.hpp"

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
  Tensor<float> head_norm_w;             // [d]
  std::vector<int32_t> compression_map;  // [V] Engram's compressed ids
};

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
