#pragma once
// DSpark's drafter as data (DESIGN 5.4, as released): its weights as the kernels take them.
// reference/drafter.hpp computes the pass in double from these values; optimized/drafter.hpp
// runs it on the model's kernels.
#include <vector>

#include "core/tensor.hpp"
#include "problem/model.hpp"  // ModelWeights::Attention, ResidualSiteWeights

namespace tandem {

// The DSpark drafter's weights as the kernels take them (float, row-major [out, in] as dense_rows
// reads them; reference::DsparkDrafter holds them and computes in double from these values).
struct DrafterWeights {
  struct Stage {
    ResidualSiteWeights attn_site, ffn_site;  // the two mHC sites (fn, base, scale, norm_w)
    // wq [heads x 512, width], wo [width, heads x 512], sinks [heads], the stage's own window
    // wkv [512, width] and norm [512]; the other roles are empty.
    ModelWeights::Attention attn;
    Tensor<float> router;       // [experts, width]
    std::vector<float> bias;    // [experts] the router's bias (selection only)
    Tensor<float> w_in, w_out;  // [experts + 1, hidden, width], [experts + 1, width, hidden]:
                                // the routed experts, then the shared one
  };
  Tensor<float> main_proj;  // [width, 3 x backbone width]
  Tensor<float> main_norm;  // [width]
  Tensor<float> embed;      // [V, width]
  std::vector<Stage> stages;
  Tensor<float> head_norm;   // [width]
  Tensor<float> unembed;     // [V, width]
  Tensor<float> markov_in;   // W1 [V, r]
  Tensor<float> markov_out;  // W2 [r, V]
  Tensor<float> confidence;  // [width + r]
};

}  // namespace tandem
