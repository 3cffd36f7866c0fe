#pragma once
// The end-to-end tiny model's own sizes (its blocks reuse the residual, Engram, vision and
// DSpark sections); parsed in core/model_config.cpp.

namespace tandem {

struct ModelShape {
  int blocks = 4;          // attention + MoE blocks, two mHC sites each; >= 3 (DSpark features)
  int heads = 2;           // attention heads; residual.d / heads per head
  int ffn_hidden = 128;    // hidden width of each MoE expert
  int prompt_tokens = 12;  // text tokens around the image in the verification prompt
};

}  // namespace tandem
