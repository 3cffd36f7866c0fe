#pragma once
// The vision path's verification case sizes (DESIGN 5.3); parsed in core/model_config.cpp.

#include <cstdint>

namespace tandem {

struct VisionConfig {
  int image_w = 640, image_h = 480;  // pixels
  int width = 32;                    // patch embedding width C
  int heads = 2, head_dim = 16;      // 2D RoPE
  int experts = 64, top_k = 6;       // MoE gate
  int text_tokens = 8;               // text positions beside the image's
};

// Token ids of one image in the text sequence: START, (IMAGE x w' + NEWLINE) x h', END.
enum VisionToken : int32_t { kStart = -10, kImage = -11, kNewline = -12, kEnd = -13 };

}  // namespace tandem
