#pragma once
// The vision path's verification case sizes and the image processor's sizing rules and
// geometry (DESIGN 5.3); parsed in core/model_config.cpp, where a config's image is sized.

#include <cstdint>

namespace tandem {

// How the released image processor sizes an image (DESIGN 5.3); the defaults are the release's.
struct ImageSizing {
  int64_t min_pixels = 544 * 544;  // smaller images are upscaled to about this area
  int max_tokens = 1024;           // text positions of the image's span: h'(w' + 1) + 2
  double max_wh_ratio = 0;         // width clamped to height x ratio; 0: unset (the release)
};

// The gate keeps a token's scores in its warp's registers: the releases route over 256 (V4-Flash)
// and 384 (V4-Pro, V4.1-Flash) experts, up to 16 of them a token.
inline constexpr int kMoeMaxExperts = 512;
inline constexpr int kMoeMaxTopK = 16;
// The experts kernel stages a token's hidden row in shared memory, 16-byte packs of it.
inline constexpr int kMoeHiddenStep = 4, kMoeMaxHidden = 16384;
// A verify row materialises every expert's weights when they are at most this many values, else
// only the routed ones (cases/moe_case.hpp: a release's 384 experts are 36 GB).
inline constexpr int64_t kMoeMaterialisedValues = int64_t{1} << 26;
// The unembedding's rows a run generates and multiplies at once (one dense_rows launch each in
// the optimized model and DSpark's drafter): a [V, d] matrix is never held whole (662M values at
// V4.1-Flash's).
inline constexpr int64_t kUnembedChunkRows = 4096;
// Whether E experts of hidden width H at width d (three [H, d] matrices each: the SwiGLU's gate
// and up, the output) are all materialised.
inline bool moe_materialises_every_expert(int64_t E, int64_t H, int64_t d) {
  return double(E) * 3 * double(H) * double(d) <= double(kMoeMaterialisedValues);
}

struct VisionConfig {
  int image_w = 640, image_h = 480;  // pixels
  int width = 32;                    // patch embedding width C
  int heads = 2, head_dim = 16;      // 2D RoPE
  int experts = 64, top_k = 6;       // MoE gate
  int text_tokens = 8;               // text positions beside the image's
  // The gate's text tokens route by a seeded tid2eid table of this many rows (V4's hash layers;
  // their ids drawn from it); 0: every token ranks.
  int hash_vocab = 0;
  ImageSizing sizing;  // fields min_pixels, max_tokens, max_wh_ratio
};

inline constexpr int kPatch = 14, kUnshuffle = 3;
inline constexpr int kCell = kPatch * kUnshuffle;  // 42 px: one visual token a side

struct VisionGeometry {
  int image_w = 0, image_h = 0;      // the input image (pixels)
  int sized_w = 0, sized_h = 0;      // after the ratio clamp and the min_pixels upscale
  int canvas_w = 0, canvas_h = 0;    // what the patches cover: multiples of 14
  int content_x = 0, content_y = 0;  // the image resized into the canvas, aspect kept,
  int content_w = 0, content_h = 0;  // centred (a side may round to 0 px: require_content)
  int grid_w = 0, grid_h = 0;        // patches
  int tokens_w = 0, tokens_h = 0;    // after the 3x3 unshuffle: ceil(grid / 3)
  int64_t visual_tokens() const { return int64_t{tokens_w} * tokens_h; }
  int64_t patches() const { return int64_t{grid_w} * grid_h; }
  int64_t sequence_tokens() const { return span_tokens(tokens_w, tokens_h); }
  // Text positions of a tokens_w x tokens_h grid: rows with their NEWLINE, START and END.
  static int64_t span_tokens(int64_t tw, int64_t th) { return th * (tw + 1) + 2; }
};
// The released image processor's sizes (DESIGN 5.3): clamp the width to height x max_wh_ratio
// (when set), upscale below min_pixels (truncating), round up to whole patches, and when the
// span exceeds max_tokens take the closed-form largest aspect-preserving canvas; then where
// PIL's ImageOps.pad puts the image in that canvas. BadInput for sides outside [1, 2^20].
VisionGeometry vision_geometry(int width, int height, const ImageSizing& sizing);
// BadInput when the image's content in its canvas has a side of 0 px (a 100000x1 image): the
// release's PIL refuses that resize.
void require_content(const VisionGeometry& g);

// Token ids of one image in the text sequence: START, (IMAGE x w' + NEWLINE) x h', END.
enum VisionToken : int32_t { kStart = -10, kImage = -11, kNewline = -12, kEnd = -13 };

}  // namespace tandem
