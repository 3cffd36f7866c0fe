#pragma once
// Helpers every case generator shares: seeded uniform values (Philox keyed by (seed, id, index)
// so every backend and run sees the same numbers) and float tensors viewed as doubles.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/philox.hpp"
#include "core/tensor.hpp"

namespace tandem {

inline float seeded_uniform(uint64_t seed, uint32_t id, uint32_t index, float lo, float hi) {
  return lo + (hi - lo) * philox_uniform(philox_draw(seed, id, index).v[0]);
}

inline Tensor<float> seeded_tensor(Shape shape, uint64_t seed, uint32_t id, float lo, float hi) {
  Tensor<float> t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i)
    t.data[i] = seeded_uniform(seed, id, static_cast<uint32_t>(i), lo, hi);
  return t;
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
