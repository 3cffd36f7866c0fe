#include "problem/vision.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace tandem {

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
