#include "core/vision_config.hpp"

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

void require_content(const VisionGeometry& g) {
  if (g.content_w < 1 || g.content_h < 1)
    throw_bad_input(
        "image {}x{} px fits its {}x{} px canvas as {}x{} px: a side rounds to 0 px "
        "(the release's PIL refuses that resize)",
        g.image_w, g.image_h, g.canvas_w, g.canvas_h, g.content_w, g.content_h);
}

}  // namespace tandem
