#pragma once
// Helpers every case generator shares: seeded uniform values (Philox keyed by (seed, id, index)
// so every backend and run sees the same numbers) and float tensors viewed as doubles.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "core/philox.hpp"
#include "core/tensor.hpp"

namespace tandem {

// Element `index` of stream `id`: counters past 2^32 go on in Philox's stream word, so a
// table of more than 2^32 values (a release's experts) never repeats itself.
inline float seeded_uniform(uint64_t seed, uint32_t id, uint64_t index, float lo, float hi) {
  return lo + (hi - lo) * philox_uniform(
                              philox_draw(seed, id, uint32_t(index), uint32_t(index >> 32)).v[0]);
}

inline Tensor<float> seeded_tensor(Shape shape, uint64_t seed, uint32_t id, float lo, float hi) {
  Tensor<float> t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i)
    t.data[i] = seeded_uniform(seed, id, static_cast<uint32_t>(i), lo, hi);
  return t;
}

// t with every value rounded to bf16 (what a kernel's bf16 storage holds).
inline Tensor<float> bf16_rounded(Tensor<float> t) {
  for (float& v : t.data) v = bf16_decode(bf16_encode(v));
  return t;
}

// seeded_tensor's values rounded to bf16: inputs the kernels store as bf16.
inline Tensor<float> seeded_bf16_tensor(Shape shape, uint64_t seed, uint32_t id, float lo,
                                        float hi) {
  return bf16_rounded(seeded_tensor(std::move(shape), seed, id, lo, hi));
}

// Baseline error draws (DESIGN 4 as refined in the README): the orders other than the given one
// in which a run sums its hidden dimension, as permutations (perm[i]: original index at i).
inline std::vector<int64_t> reversed_order(int64_t n) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = n - 1 - i;
  return p;
}
inline std::vector<int64_t> rotated_order(int64_t n) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = (i + n / 2) % n;
  return p;
}
// The id-th Fisher-Yates shuffle of n, drawn from Philox: the same order on every platform.
inline std::vector<int64_t> shuffled_order(int64_t n, uint32_t id) {
  constexpr uint64_t kOrderSeed = 0x6f72646572;  // "order": any fixed key
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[i], p[philox_draw(kOrderSeed, id, static_cast<uint32_t>(i)).v[0] % (i + 1)]);
  return p;
}

// The fewest baseline error draws that size one comparison row's budget: a row's budget is twice
// its largest baseline error, and the largest of a few draws is too often a lucky one (measured
// on dense_rows with GELU, where most of a short row is exactly 0: 16 draws still failed 2 in
// 30000 correct cases, 64 none in 200000; README, tolerance refinement 2).
inline constexpr int64_t kMinRowErrorDraws = 64;

// The orders besides the given one for rows of `row` elements over a hidden dimension n:
// reversed, rotated, then seeded shuffles until the row holds kMinRowErrorDraws draws.
inline std::vector<std::vector<int64_t>> baseline_orders(int64_t n, int64_t row,
                                                         int64_t min_draws = kMinRowErrorDraws) {
  const int64_t runs = std::max<int64_t>(3, (min_draws + row - 1) / std::max<int64_t>(row, 1));
  std::vector<std::vector<int64_t>> orders{reversed_order(n), rotated_order(n)};
  for (int64_t k = 3; k < runs; ++k) orders.push_back(shuffled_order(n, static_cast<uint32_t>(k)));
  return orders;
}

// Keeps, per element, whichever of two baseline draws is farther from truth.
inline void keep_farthest(Tensor<double>& kept, const Tensor<double>& other,
                          const Tensor<double>& truth) {
  for (int64_t i = 0; i < kept.size(); ++i)
    if (std::fabs(other.data[i] - truth.data[i]) > std::fabs(kept.data[i] - truth.data[i]))
      kept.data[i] = other.data[i];
}

inline std::vector<double> as_doubles(const Tensor<float>& t) {
  return {t.data.begin(), t.data.end()};
}

}  // namespace tandem
