#pragma once
// The vision tower's parts as data (DESIGN 5.3): the image geometry, the zero-padded 3x3
// pixel-unshuffle (and its inverse), 2D RoPE, and the MoE gate with per-modality biases.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/tensor.hpp"
#include "core/vision_config.hpp"
#include "problem/dtype.hpp"
#include "problem/traffic.hpp"

namespace tandem {

// The image's token ids (core/vision_config.hpp), START, (IMAGE x w' + NEWLINE) x h', END.
std::vector<int32_t> image_token_layout(const VisionGeometry& g);

struct UnshuffleOutputs {
  Tensor<float> tokens;    // [ceil(h/3) * ceil(w/3), 9 * C], channel-major: c * 9 + ki * 3 + kj
  Tensor<float> restored;  // [h, w, C] from the inverse kernel
  LaunchLog launches;
};
// grid: [h, w, C] patch embeddings (values of act), non-empty.
void validate_unshuffle_grid(const Tensor<float>& grid);

struct RopeInputs {
  Tensor<float> x;                // [N, heads, hd] (values of act)
  std::vector<int32_t> row, col;  // [N] patch positions
  double theta = 10000;
};
struct RopeOutputs {
  Tensor<float> x;  // [N, heads, hd]
  LaunchLog launches;
};
void validate_rope_inputs(const RopeInputs& in);

struct MoeGateInputs {
  Tensor<float> logits;                   // [T, E]
  std::vector<uint8_t> is_image;          // [T]
  std::vector<float> bias_text, bias_vl;  // [E] each (bias_text may be empty where text hashes)
  int top_k = 8;
  float route_scale = 1.5f;
  // Hash routing (V4's first num_hash_layers layers, ffn.gate.tid2eid): a text token takes the
  // experts of its id's row, in the row's order, at their unbiased scores (renormalised, times
  // route_scale, as ranked ones); image tokens still rank s + bias_vl. Empty: every token ranks.
  Tensor<int32_t> tid2eid;         // [V, top_k], entries in [0, E)
  std::vector<int32_t> token_ids;  // [T] with tid2eid: text ids in [0, V); image entries unread
  bool hashes() const { return !tid2eid.shape.empty(); }  // shaped (a case's, before loading)
  int64_t hashed_tokens() const;                          // text tokens routed by the table
};
struct MoeGateOutputs {
  Tensor<int32_t> experts;  // [T, k], in selection order (best first)
  Tensor<float> weights;    // [T, k]
  LaunchLog launches;
};
void validate_moe_gate_inputs(const MoeGateInputs& in);

// A seeded table shaped as the release's tid2eid: row v holds k distinct experts of [0, E)
// (Floyd's sampling over Philox stream `stream`: k draws a row, no rejection).
Tensor<int32_t> seeded_tid2eid(int64_t V, int E, int k, uint64_t seed, uint32_t stream);

// The three kernels' inputs for one image and its text (the vision cases').
struct VisionInputs {
  VisionGeometry geometry;
  Tensor<float> grid;  // [grid_h, grid_w, C] patch embeddings (patchified pixels x W_patch)
  RopeInputs rope;     // one row per patch: its (row, col)
  MoeGateInputs gate;  // image tokens (the unshuffled ones), then text tokens
};

// Every input tensor with its name (the golden blob's tensor names); the geometry, RoPE's theta
// and the gate's top_k and route_scale come from the config.
template <class Input, class F>
requires std::is_same_v<std::remove_const_t<Input>, VisionInputs>
void for_each_tensor(Input& in, F&& f) {
  f("grid", in.grid);
  f("rope.x", in.rope.x);
  f("rope.row", in.rope.row);
  f("rope.col", in.rope.col);
  f("gate.logits", in.gate.logits);
  f("gate.is_image", in.gate.is_image);
  f("gate.bias_text", in.gate.bias_text);
  f("gate.bias_vl", in.gate.bias_vl);
  if (in.gate.hashes()) {  // hash-routing cases only (older golden files have neither)
    f("gate.tid2eid", in.gate.tid2eid);
    f("gate.token_ids", in.gate.token_ids);
  }
}

}  // namespace tandem
