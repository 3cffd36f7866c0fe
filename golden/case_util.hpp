#pragma once
// Helpers every case generator shares: seeded uniform values (Philox keyed by (seed, id, index)
// so every backend and run sees the same numbers) and float tensors viewed as doubles.
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

inline std::vector<double> as_doubles(const Tensor<float>& t) {
  return {t.data.begin(), t.data.end()};
}

}  // namespace tandem
