#pragma once
// A dense row-major host tensor with a named shape; the unit every part exchanges.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace tandem {

using Shape = std::vector<int64_t>;

inline int64_t shape_elements(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<>());
}

template <class T>
struct Tensor {
  Shape shape;
  std::vector<T> data;

  Tensor() = default;
  explicit Tensor(Shape s, T fill = T{}) : shape(std::move(s)), data(shape_elements(shape), fill) {}
  Tensor(Shape s, std::vector<T> d) : shape(std::move(s)), data(std::move(d)) {
    if (static_cast<int64_t>(data.size()) != shape_elements(shape))
      throw BadInput("tensor data has " + std::to_string(data.size()) +
                     " elements, its shape needs " + std::to_string(shape_elements(shape)));
  }

  int64_t size() const { return static_cast<int64_t>(data.size()); }
  int64_t dim(size_t i) const { return shape.at(i); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
  std::span<T> span() { return data; }
  std::span<const T> span() const { return data; }
};

// Converts element-wise (e.g. float -> double for comparison).
template <class To, class From>
Tensor<To> tensor_cast(const Tensor<From>& t) {
  Tensor<To> r(t.shape);
  for (int64_t i = 0; i < t.size(); ++i) r.data[i] = static_cast<To>(t.data[i]);
  return r;
}

}  // namespace tandem
