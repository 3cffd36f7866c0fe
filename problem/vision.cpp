#include "problem/vision.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "core/tensor_checks.hpp"

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

namespace {

void validate_hash_routing(const MoeGateInputs& in, int64_t T, int64_t E) {
  const Tensor<int32_t>& table = in.tid2eid;
  if (table.shape.size() != 2 || table.dim(1) != in.top_k)
    throw_bad_input("moe gate input: tid2eid must be [V, top_k = {}], got [{}]", in.top_k,
                    fmt::join(table.shape, ", "));
  for (int64_t i = 0; i < table.size(); ++i)
    if (table.data[size_t(i)] < 0 || table.data[size_t(i)] >= E)
      throw_bad_input("moe gate input: tid2eid[{}, {}] is {}, outside the experts [0, {})",
                      i / in.top_k, i % in.top_k, table.data[size_t(i)], E);
  if (in.token_ids.size() != size_t(T))
    throw_bad_input("moe gate input: token_ids [T = {}] expected beside tid2eid, got {}", T,
                    in.token_ids.size());
  for (int64_t t = 0; t < T; ++t)
    if (!in.is_image[size_t(t)] &&
        (in.token_ids[size_t(t)] < 0 || in.token_ids[size_t(t)] >= table.dim(0)))
      throw_bad_input("moe gate input: token_ids[{}] is {}, outside tid2eid's rows [0, {})", t,
                      in.token_ids[size_t(t)], table.dim(0));
}

}  // namespace

int64_t MoeGateInputs::hashed_tokens() const {
  return hashes() ? int64_t(std::count(is_image.begin(), is_image.end(), uint8_t{0})) : 0;
}

Tensor<int32_t> seeded_tid2eid(int64_t V, int E, int k, uint64_t seed, uint32_t stream) {
  const int64_t draws_per_row = (k + 3) / 4;  // 4 Philox words a draw
  if (k < 1 || k > E || V < 1 || V * draws_per_row > (int64_t{1} << 32))
    throw_bad_input(
        "seeded tid2eid: {} rows of k = {} distinct experts of E = {} (k in [1, E], at most 2^32 "
        "draws)",
        V, k, E);
  Tensor<int32_t> t({V, k});
  for (int64_t v = 0; v < V; ++v) {
    int32_t* row = t.ptr() + v * k;
    // Floyd: for j = E - k .. E - 1, take a uniform r in [0, j]; r if not yet taken, else j.
    for (int i = 0; i < k; ++i) {
      const int32_t j = E - k + i;
      const uint32_t word = philox_draw(seed, stream, uint32_t(v * draws_per_row + i / 4)).v[i % 4];
      const int32_t r = int32_t(word % uint32_t(j + 1));
      row[i] = std::find(row, row + i, r) == row + i ? r : j;
    }
  }
  return t;
}

void validate_moe_gate_inputs(const MoeGateInputs& in) {
  const int64_t T = in.logits.shape.size() == 2 ? in.logits.dim(0) : -1;
  const int64_t E = T >= 0 ? in.logits.dim(1) : 0;
  if (T < 1 || E < 1 || E > kMoeMaxExperts)
    throw_bad_input("moe gate input: expected logits [T >= 1, 1 <= E <= {}]", kMoeMaxExperts);
  if (in.top_k < 1 || in.top_k > kMoeMaxTopK || in.top_k > E)
    throw_bad_input("moe gate: top_k must be in [1, min({}, E = {})], got {}", kMoeMaxTopK, E,
                    in.top_k);
  if (in.is_image.size() != size_t(T))
    throw_bad_input("moe gate input: is_image [T = {}] expected, got {}", T, in.is_image.size());
  // Each bias [E], or none where no token ranks with it.
  const int64_t images =
      std::count_if(in.is_image.begin(), in.is_image.end(), [](uint8_t v) { return v != 0; });
  const bool text_ranks = !in.hashes() && images < T;
  for (const auto& [name, bias, used] : {std::tuple{"bias_text", &in.bias_text, text_ranks},
                                         std::tuple{"bias_vl", &in.bias_vl, images > 0}})
    if (bias->size() != size_t(E) && (used || !bias->empty()))
      throw_bad_input("moe gate input: {} must be [E = {}]{}, got {} values", name, E,
                      used ? "" : " or empty", bias->size());
  if (in.hashes())
    validate_hash_routing(in, T, E);
  else if (!in.token_ids.empty())
    throw_bad_input("moe gate input: token_ids without tid2eid (only a hash gate reads them)");
  require_finite(in.logits, "moe gate input", "logits");
}

}  // namespace tandem
