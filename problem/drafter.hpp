#pragma once
// DSpark's drafter as data (DESIGN 5.4, as released): its weights as the kernels take them.
// reference/drafter.hpp computes the pass in double from these values; optimized/drafter.hpp
// runs it on the model's kernels.
#include <cstdint>
#include <vector>

#include "core/dspark_config.hpp"
#include "core/residual_config.hpp"
#include "core/tensor.hpp"
#include "problem/model.hpp"  // ModelWeights::Attention, Projection, ResidualSiteWeights

namespace tandem {

// The DSpark drafter's weights as the kernels take them (float, row-major [out, in] as dense_rows
// reads them; reference::DsparkDrafter computes in double from these values). The experts, the
// embedding and the attention's LoRAs are seeded matrices generated where read, as the end-to-end
// model's (problem/model.hpp): at the release's widths a stage's 129 experts are 4.6e9 values and
// the embeddings 662M each. The unembedding is seeded until the training step fits it (held).
struct DrafterWeights {
  struct Stage {
    ResidualSiteWeights attn_site, ffn_site;  // the two mHC sites (fn, base, scale, norm_w)
    // The query and output LoRAs (core/attention_lora.hpp), sinks [heads], the stage's own
    // window wkv [512, width] and norm [512]; the other roles are empty.
    ModelWeights::Attention attn;
    Tensor<float> router;     // [experts, width]
    std::vector<float> bias;  // [experts] the router's bias (selection only)
    // experts + 1 x [2 hidden, width] (gate rows, then up rows), experts + 1 x [width, hidden]:
    // the routed experts, then the shared one
    std::vector<SeededMatrix> w_in, w_out;
  };
  Tensor<float> main_proj;  // [width, 3 x backbone width]
  Tensor<float> main_norm;  // [width]
  SeededMatrix embed;       // [V, width]
  std::vector<Stage> stages;
  Tensor<float> head_norm;   // [width]
  Projection unembed;        // [V, width]: read kUnembedChunkRows rows at a time
  Tensor<float> markov_in;   // W1 [V, r]
  Tensor<float> markov_out;  // W2 [r, V]
  Tensor<float> confidence;  // [width + r]
};

// How the drafter chooses: greedy (argmax, lower index wins ties) or sampled from
// softmax(logits / temperature) rounded to float, with the uniform of Philox (seed, request,
// position of x_k, stream 2); verification uses streams 0 and 1 of the same keys.
struct DraftChoice {
  bool greedy = true;
  uint64_t seed = 0;
  uint32_t request = 0, position = 0;  // position: the sequence position of x_1
  double temperature = 1.0;
};

// The stages' and head's mHC mixing: V4.1's (20 Sinkhorn iterations, hc_eps 1e-6) at the
// drafter's width and norm eps.
inline ResidualConfig dspark_mhc_config(const DsparkConfig& c) {
  ResidualConfig r;
  r.d = c.width, r.norm_eps = c.norm_eps;
  return r;
}

// BadInput naming the tensor unless `w` is a drafter of config c over feature rows of
// `feature_dim` (shapes, finite values).
void validate_drafter_weights(const DsparkConfig& c, int64_t feature_dim, const DrafterWeights& w);
// BadInput unless features are [T >= 0, feature_dim] finite values, `last` a token of the
// vocabulary and `first` (the first row's position) >= 0.
void validate_drafter_inputs(const DsparkConfig& c, int64_t feature_dim,
                             const Tensor<float>& features, int32_t last, int64_t first);

}  // namespace tandem
