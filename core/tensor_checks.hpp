#pragma once
// Host-side checks of a tensor's values for the problems' validation (fmt: never seen by nvcc).
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace tandem {

// The row-major multi-index of flat element i of a tensor shaped s: "1, 3" for i = 7 of [2, 4]
// (the flat index where s does not hold element i).
inline std::string element_index(const Shape& s, int64_t i) {
  int64_t stride = shape_elements(s);
  if (i < 0 || i >= stride) return std::to_string(i);
  std::string index;
  for (const int64_t extent : s) {
    stride /= extent;
    index += fmt::format("{}{}", index.empty() ? "" : ", ", i / stride);
    i %= stride;
  }
  return index;
}

// Bad input at the first NaN or infinity: "<what> '<name>'[1, 3] is not finite (nan)".
template <class T>
void require_finite(const Tensor<T>& t, std::string_view what, std::string_view name) {
  for (int64_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t.data[size_t(i)]))
      throw_bad_input("{} '{}'[{}] is not finite ({})", what, name, element_index(t.shape, i),
                      t.data[size_t(i)]);
}

}  // namespace tandem
