#pragma once
// Seeded weights generated on demand. Value i of a Philox stream is a function of (seed, stream,
// i) alone, so any block of a matrix's rows holds the same values whichever other rows are
// generated: a model at a release's sizes never holds its vocabulary-sized embeddings ([V, d]:
// 662M values for V4.1-Flash) or its expert table (384 x 2 x 2304 x 5120 values) whole.
#include <algorithm>
#include <cstdint>
#include <vector>

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

// The instruction sets the stream generator is built for; it runs the best one the CPU has.
enum class SeededIsa { baseline, avx2, avx512 };
// Those this CPU runs, baseline first (tests compare each with seeded_weight).
std::vector<SeededIsa> seeded_isas();

// The Philox words behind values first .. first + n - 1 of a stream (philox_draw(seed, stream,
// i, i >> 32).v[0]), 32 counters at a time: Philox's rounds on independent lanes, built for
// AVX-512 and AVX2 beside the baseline (3.1x and 1.9x the baseline's speed here; integer
// operations only, so every build gives the same words). core/seeded_matrix.cpp.
void seeded_words(uint64_t seed, uint32_t stream, uint64_t first, int64_t n, uint32_t* out);
// With the build for `isa` (one of seeded_isas(); another is BadInput).
void seeded_words(uint64_t seed, uint32_t stream, uint64_t first, int64_t n, uint32_t* out,
                  SeededIsa isa);

// Values first .. first + n - 1 of a stream into out: seeded_weight's. The words come in
// blocks; their conversion to [lo, hi) stays in this baseline code, where no multiply-add is
// contracted (the values do not depend on the CPU).
template <class S>
void seeded_weights(uint64_t seed, uint32_t stream, uint64_t first, int64_t n, double lo, double hi,
                    S* out) {
  constexpr int64_t kBlock = 2048;
  uint32_t words[kBlock];
  for (int64_t done = 0; done < n; done += kBlock) {
    const int64_t m = std::min(kBlock, n - done);
    seeded_words(seed, stream, first + uint64_t(done), m, words);
    for (int64_t i = 0; i < m; ++i)
      out[done + i] = S(float(lo + (hi - lo) * philox_uniform(words[i])));
  }
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
