#pragma once
// Seeded weights generated on demand. Value i of a Philox stream is a function of (seed, stream,
// i) alone, so any block of a matrix's rows holds the same values whichever other rows are
// generated: a model at a release's sizes never holds its vocabulary-sized embeddings ([V, d]:
// 662M values for V4.1-Flash) or its expert table (384 x 2 x 2304 x 5120 values) whole.
#include <cstdint>

#include "core/philox.hpp"
#include "core/tensor.hpp"

namespace tandem {

// Value i of stream `stream` under `seed`, uniform in [lo, hi) and exactly a float (the kernels
// hold it as float; the double reference reads the same value). Counters past 2^32 go on in
// Philox's stream word, so a stream of more than 2^32 values never repeats itself.
inline double seeded_weight(uint64_t seed, uint32_t stream, uint64_t i, double lo, double hi) {
  const Philox4 r = philox_draw(seed, stream, uint32_t(i), uint32_t(i >> 32));
  return float(lo + (hi - lo) * philox_uniform(r.v[0]));
}

// A [rows, cols] matrix of seeded weights, element (r, c) = value r * cols + c of its stream.
struct SeededMatrix {
  uint64_t seed = 0;
  uint32_t stream = 0;
  int64_t rows = 0, cols = 0;
  double lo = 0, hi = 0;

  // Rows [first, first + count) into out, row-major ([count, cols]).
  template <class S>
  void rows_into(int64_t first, int64_t count, S* out) const {
    for (int64_t i = 0; i < count * cols; ++i)
      out[i] = S(seeded_weight(seed, stream, uint64_t(first * cols + i), lo, hi));
  }
  // Rows [first, first + count) as floats [count, cols].
  Tensor<float> row_block(int64_t first, int64_t count) const {
    Tensor<float> t({count, cols});
    rows_into(first, count, t.ptr());
    return t;
  }
  Tensor<float> whole() const { return row_block(0, rows); }
};

}  // namespace tandem
