#pragma once
// Eigen reference of the vision input path (DESIGN 5.3): preprocessing geometry and pixels,
// patch embedding, 2D RoPE, zero-padded 3x3 pixel-unshuffle, the aligner, the token layout, and
// the MoE gate with per-modality selection biases.
#include <Eigen/Dense>

#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "core/vision_config.hpp"
#include "optimized/vision.hpp"

namespace tandem::reference {

inline constexpr int kPatch = 14, kUnshuffle = 3, kMaxVisualTokens = 1024;
inline constexpr double kMinArea = 544.0 * 544.0;

struct VisionGeometry {
  int resized_w = 0, resized_h = 0;  // after upscaling / shrinking (pixels)
  int padded_w = 0, padded_h = 0;    // letterboxed to multiples of 14
  int grid_w = 0, grid_h = 0;        // patches
  int tokens_w = 0, tokens_h = 0;    // after the 3x3 unshuffle: ceil(grid / 3)
  int64_t visual_tokens() const { return int64_t{tokens_w} * tokens_h; }
  int64_t patches() const { return int64_t{grid_w} * grid_h; }
  int64_t sequence_tokens() const { return 2 + int64_t{tokens_h} * (tokens_w + 1); }
};
// Upscale (keeping the aspect ratio) when the area is below 544^2 px, letterbox to multiples of
// 14, and shrink until at most 1024 visual tokens remain. BadInput for sizes outside [1, 2^20].
VisionGeometry vision_geometry(int width, int height);

// The image's token ids (core/vision_config.hpp), START, (IMAGE x w' + NEWLINE) x h', END.
using ::tandem::kEnd, ::tandem::kImage, ::tandem::kNewline, ::tandem::kStart;
std::vector<int32_t> image_token_layout(const VisionGeometry& g);

// Pixels [H, W, 3] (0..255) -> normalised, letterboxed [padded_h, padded_w, 3]: bilinear resize
// (half-pixel centres) to the resized size, gray 127 padding right and bottom, (x/255-0.5)/0.5.
Tensor<float> preprocess(const Tensor<uint8_t>& rgb, const VisionGeometry& g);
// [grid_h, grid_w, 3*14*14] patches (channel-major within a patch: c*196 + py*14 + px).
Tensor<float> patchify(const Tensor<float>& image);

// Linear patch embedding: [grid_h, grid_w, 588] x w [C, 588]^T -> [grid_h, grid_w, C].
// In scalar S (double: truth; float: the baseline, sums in plain order).
template <class S = double>
Tensor<double> patch_embedding(const Tensor<float>& patches, const Tensor<float>& w);

// 2D RoPE, half-split: rope = hd/2; inv_freq = theta^(-arange(0, rope, 2)/rope);
// angles = [row * inv_freq, col * inv_freq]; [x1 cos - x2 sin, x2 cos + x1 sin].
template <class S>
Tensor<double> rope_2d(const RopeInputs& in);

// grid [h, w, C] -> [ceil(h/3) ceil(w/3), 9C], zero padded right/bottom, channel-major.
template <class T>
Tensor<T> unshuffle(const Tensor<T>& grid);
template <class T>
Tensor<T> unshuffle_inverse(const Tensor<T>& tokens, int64_t h, int64_t w);

// Linear -> GELU (exact, erf) -> Linear on each token row.
template <class S = double>
Tensor<double> aligner(const Tensor<double>& x, const Tensor<double>& w1, const Tensor<double>& b1,
                       const Tensor<double>& w2, const Tensor<double>& b2);

// s = sqrt(softplus(logits)); top-k of s + bias (bias_vl for image tokens, bias_text otherwise),
// ties to the lower index; weights = s of the selected / (sum + 1e-20) * route_scale.
struct MoeGateRef {
  Tensor<int32_t> experts;
  Tensor<double> weights;
};
template <class S>
MoeGateRef moe_gate(const MoeGateInputs& in);
// The weights for a given selection (to compare weights where two precisions selected alike).
template <class S>
Tensor<double> moe_weights(const MoeGateInputs& in, const Tensor<int32_t>& experts);
// Per-token expert counts of one modality.
std::vector<double> expert_load(const Tensor<int32_t>& experts, const std::vector<uint8_t>& is_image,
                                bool image, int n_experts);
// bias += speed * sign(mean(load) - load), for one modality's bias (outside the optimizer).
void update_bias(std::vector<float>& bias, const std::vector<double>& load, float speed);

}  // namespace tandem::reference
