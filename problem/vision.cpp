#include "problem/vision.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace tandem {

namespace {

struct Size {
  int64_t w = 0, h = 0;
};

// Python's round() on a float: half to even (the default rounding mode).
int py_round(double x) { return static_cast<int>(std::nearbyint(x)); }

// (1) the ratio clamp and (2) the upscale, in the release's arithmetic (Python ints, doubles,
// int() truncating).
Size clamp_and_upscale(int64_t w, int64_t h, const ImageSizing& s) {
  if (s.max_wh_ratio > 0 && w > h * s.max_wh_ratio) w = static_cast<int64_t>(h * s.max_wh_ratio);
  if (w * h < s.min_pixels) {  // w h >= 1: max_wh_ratio >= 1 keeps w >= 1
    // The release writes (min_pixels / (w h)) ** 0.5, which CPython evaluates with libm's pow.
    const double r = std::pow(double(s.min_pixels) / double(w * h), 0.5);
    w = static_cast<int64_t>(w * r), h = static_cast<int64_t>(h * r);
  }
  return {w, h};
}

int64_t tokens_for(int64_t px) { return (px / kPatch + kUnshuffle - 1) / kUnshuffle; }
int64_t span_for(Size canvas) {
  return VisionGeometry::span_tokens(tokens_for(canvas.w), tokens_for(canvas.h));
}

// (4) The largest aspect-preserving canvas whose span fits: the continuous grid wmax x hmax
// with hmax (wmax + 1) = max_tokens - 2 and hmax = wmax h / w, floored to whole cells. It is
// solved with the sized w, h of steps (1)-(2), as the release's solve_resize_ratio is called.
// Each operation in Python's order and rounding, so sizes such as 1920x1080 land exactly.
Size closed_form(Size s, int max_tokens) {
  const double r = double(s.h) / double(s.w);
  const double wmax = std::sqrt((max_tokens - 2) / r + 0.25) - 0.5, hmax = wmax * r;
  // One cell on the short side: a column (max_tokens - 2) // 2 rows tall (each row an IMAGE and
  // its NEWLINE), or a row of max_tokens - 3 IMAGEs (+ NEWLINE, START, END).
  if (wmax < 1) return {kCell, (max_tokens - 2) / 2 * kCell};
  if (hmax < 1) return {int64_t{max_tokens - 3} * kCell, kCell};
  const double beta =
      std::min(std::floor(wmax) * kCell / double(s.w), std::floor(hmax) * kCell / double(s.h));
  auto side = [beta](int64_t px) {
    return static_cast<int64_t>(std::floor(px * beta / kPatch)) * kPatch;
  };
  return {side(s.w), side(s.h)};
}

// (3) whole patches, then (4) when the span is over budget.
Size canvas_for(Size s, int max_tokens) {
  const Size whole{(s.w + kPatch - 1) / kPatch * kPatch, (s.h + kPatch - 1) / kPatch * kPatch};
  if (span_for(whole) <= max_tokens) return whole;
  const Size shrunk = closed_form(s, max_tokens);
  // Exactly, the floored cells fit; a floor taken just above an integer by rounding could
  // overshoot, and the release raises then too (its safe_resize checks the budget again).
  if (span_for(shrunk) > max_tokens)
    throw_bad_input(
        "image sized {}x{} px: the closed-form canvas {}x{} px still spans {} > {} "
        "positions",
        s.w, s.h, shrunk.w, shrunk.h, span_for(shrunk), max_tokens);
  return shrunk;
}

// (5) Where PIL's ImageOps.pad(image, canvas, centering=(0.5, 0.5)) puts the original image: the
// full width (or height) of the canvas, the other side Python-rounded, centred (half to even).
void place_content(VisionGeometry& g) {
  const double image = double(g.image_w) / g.image_h, canvas = double(g.canvas_w) / g.canvas_h;
  g.content_w = g.canvas_w, g.content_h = g.canvas_h;
  if (image > canvas) {
    g.content_h = py_round(double(g.image_h) / g.image_w * g.canvas_w);
    g.content_y = py_round((g.canvas_h - g.content_h) * 0.5);
  } else if (image < canvas) {
    g.content_w = py_round(double(g.image_w) / g.image_h * g.canvas_h);
    g.content_x = py_round((g.canvas_w - g.content_w) * 0.5);
  }
}

}  // namespace

VisionGeometry vision_geometry(int width, int height, const ImageSizing& sizing) {
  if (width < 1 || height < 1 || width > (1 << 20) || height > (1 << 20))
    throw_bad_input("image size {}x{} px: each side must be in [1, 2^20]", width, height);
  VisionGeometry g;
  g.image_w = width, g.image_h = height;
  const Size sized = clamp_and_upscale(width, height, sizing);
  const Size canvas = canvas_for(sized, sizing.max_tokens);
  g.sized_w = static_cast<int>(sized.w), g.sized_h = static_cast<int>(sized.h);
  g.canvas_w = static_cast<int>(canvas.w), g.canvas_h = static_cast<int>(canvas.h);
  g.grid_w = g.canvas_w / kPatch, g.grid_h = g.canvas_h / kPatch;
  g.tokens_w = static_cast<int>(tokens_for(canvas.w));
  g.tokens_h = static_cast<int>(tokens_for(canvas.h));
  place_content(g);
  return g;
}

std::vector<int32_t> image_token_layout(const VisionGeometry& g) {
  std::vector<int32_t> t{kStart};
  for (int r = 0; r < g.tokens_h; ++r) {
    t.insert(t.end(), g.tokens_w, kImage);
    t.push_back(kNewline);
  }
  t.push_back(kEnd);
  return t;
}

void validate_unshuffle_grid(const Tensor<float>& grid) {
  if (grid.shape.size() != 3 || grid.size() == 0)
    throw_bad_input("vision unshuffle input: expected a non-empty [h, w, C] grid");
  if (grid.dim(0) * grid.dim(1) > (1 << 24) || grid.dim(2) > (1 << 16))
    throw_bad_input("vision unshuffle input: grid {}x{}x{} too large", grid.dim(0), grid.dim(1),
                    grid.dim(2));
}

void validate_rope_inputs(const RopeInputs& in) {
  const int64_t N = in.x.shape.size() == 3 ? in.x.dim(0) : -1;
  if (N < 1 || in.x.dim(2) % 4 || in.row.size() != size_t(N) || in.col.size() != size_t(N))
    throw_bad_input(
        "vision rope input: expected x [N, heads, hd] with hd % 4 == 0 and N row/col positions");
  for (int64_t i = 0; i < N; ++i)
    if (in.row[i] < 0 || in.col[i] < 0 || in.row[i] > (1 << 20) || in.col[i] > (1 << 20))
      throw_bad_input("vision rope input: position ({}, {}) of token {} outside [0, 2^20]",
                      in.row[i], in.col[i], i);
}

void validate_moe_gate_inputs(const MoeGateInputs& in) {
  const int64_t T = in.logits.shape.size() == 2 ? in.logits.dim(0) : -1;
  const int64_t E = T >= 0 ? in.logits.dim(1) : 0;
  if (T < 1 || E < 1 || E > kMoeMaxExperts)
    throw_bad_input("moe gate input: expected logits [T >= 1, 1 <= E <= {}]", kMoeMaxExperts);
  if (in.top_k < 1 || in.top_k > kMoeMaxTopK || in.top_k > E)
    throw_bad_input("moe gate: top_k must be in [1, min({}, E = {})], got {}", kMoeMaxTopK, E,
                    in.top_k);
  if (in.is_image.size() != size_t(T) || in.bias_text.size() != size_t(E) ||
      in.bias_vl.size() != size_t(E))
    throw_bad_input("moe gate input: is_image [T], bias_text [E] and bias_vl [E] expected");
  for (int64_t i = 0; i < in.logits.size(); ++i)
    if (!std::isfinite(in.logits.data[i]))
      throw_bad_input("moe gate input: logits[{}, {}] is not finite ({})", i / E, i % E,
                      in.logits.data[i]);
}

}  // namespace tandem
