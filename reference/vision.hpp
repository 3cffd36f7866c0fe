#pragma once
// Eigen reference of the vision input path (DESIGN 5.3): preprocessing geometry and pixels,
// patch embedding, 2D RoPE, zero-padded 3x3 pixel-unshuffle, the aligner, the token layout, and
// the MoE gate with per-modality selection biases.
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "core/tensor.hpp"
#include "core/vision_config.hpp"
#include "problem/vision.hpp"

namespace tandem::reference {

// The geometry lives with the problem (problem/vision.hpp); the reference names it here too.
using ::tandem::image_token_layout, ::tandem::vision_geometry;
using ::tandem::kCell, ::tandem::kPatch, ::tandem::kUnshuffle, ::tandem::VisionGeometry;
using ::tandem::kEnd, ::tandem::kImage, ::tandem::kNewline, ::tandem::kStart;

// PIL's BICUBIC resampling along one axis (Resample.c precompute_coeffs): output i has centre
// c = (i + 0.5) in/out; support 2 is stretched by s = max(in/out, 1) (antialiasing when
// shrinking); taps j in [int(c - 2s + 0.5), int(c + 2s + 0.5)) clipped to the image, weighted
// keys_cubic((j + 0.5 - c) / s) and normalised to sum 1.
struct ResampleTaps {
  int64_t first = 0;  // input index of weights[0]
  std::vector<double> weights;
};
std::vector<ResampleTaps> bicubic_taps(int64_t in, int64_t out);
// Keys' cubic convolution kernel with a = -0.5 (PIL's bicubic_filter), support [-2, 2].
double keys_cubic(double x);
// Pixels [H, W, 3] -> [h, w, 3] in double: horizontal pass, then vertical, each clipped to
// [0, 255] like PIL's passes (which also round to uint8: README states the bound).
Tensor<double> resize_bicubic(const Tensor<uint8_t>& rgb, int64_t w, int64_t h);

// Pixels [image_h, image_w, 3] (0..255) -> the normalised canvas [canvas_h, canvas_w, 3]: the
// image resized (bicubic) into its content box, gray 127 around it, (x/255 - 0.5)/0.5 rounded
// to bf16 (the release's dtype). BadInput when a content side rounds to 0 px (PIL refuses that
// resize, so the release fails on such an image too).
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
// ties to the lower index, or a text token's row of tid2eid where the gate hashes; weights = s
// of the selected / (sum + 1e-20) * route_scale.
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
std::vector<double> expert_load(const Tensor<int32_t>& experts,
                                const std::vector<uint8_t>& is_image, bool image, int n_experts);
// bias += speed * sign(mean(load) - load), for one modality's bias (outside the optimizer).
void update_bias(std::vector<float>& bias, const std::vector<double>& load, float speed);

}  // namespace tandem::reference
