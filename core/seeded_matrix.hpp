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

// Values first .. first + n - 1 of a stream into out: seeded_weight's, 16 counters at a time
// (Philox's rounds on independent lanes, which the compiler vectorises: ~1.8x faster on a
// release's 168M-value projections).
template <class S>
void seeded_weights(uint64_t seed, uint32_t stream, uint64_t first, int64_t n, double lo, double hi,
                    S* out) {
  constexpr int kLanes = 16;
  int64_t done = 0;
  for (; done + kLanes <= n; done += kLanes) {
    uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];  // philox_draw's counter words
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t i = first + uint64_t(done + l);
      c0[l] = stream, c1[l] = uint32_t(i), c2[l] = uint32_t(i >> 32), c3[l] = 0;
    }
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < kPhiloxRounds; ++round) {  // philox4x32_10's, lane by lane
      for (int l = 0; l < kLanes; ++l) {
        const uint64_t p0 = uint64_t{kPhiloxMul0} * c0[l], p1 = uint64_t{kPhiloxMul1} * c2[l];
        const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1;
        c1[l] = uint32_t(p1), c3[l] = uint32_t(p0), c0[l] = n0, c2[l] = n2;
      }
      k0 += kPhiloxWeyl0, k1 += kPhiloxWeyl1;
    }
    for (int l = 0; l < kLanes; ++l)
      out[done + l] = S(float(lo + (hi - lo) * philox_uniform(c0[l])));
  }
  for (; done < n; ++done)
    out[done] = S(seeded_weight(seed, stream, first + uint64_t(done), lo, hi));
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
    seeded_weights(seed, stream, uint64_t(first * cols), count * cols, lo, hi, out);
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
