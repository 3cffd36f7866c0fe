// core/philox.hpp against the Random123 known-answer vectors; core/seeded_matrix.hpp's weights
// generated on demand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/philox.hpp"
#include "core/seeded_matrix.hpp"

namespace tandem {
namespace {

void expect_kat(Philox4 ctr, uint32_t k0, uint32_t k1, Philox4 want) {
  const Philox4 got = philox4x32_10(ctr, k0, k1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
}

TEST(Philox4x32_10, KnownAnswers) {
  expect_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
  expect_kat({{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u, {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
  expect_kat({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
             {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

TEST(Philox4x32_10, DrawsAreKeyedBySeedRequestAndPosition) {
  const Philox4 a = philox_draw(1, 2, 3), b = philox_draw(1, 2, 4), c = philox_draw(2, 2, 3);
  EXPECT_NE(a.v[0], b.v[0]);
  EXPECT_NE(a.v[0], c.v[0]);
  EXPECT_EQ(philox_draw(1, 2, 3).v[0], a.v[0]);
  EXPECT_GE(philox_uniform(0xffffffffu), 0.0f);
  EXPECT_LT(philox_uniform(0xffffffffu), 1.0f);
}

// A block of rows is the whole matrix's rows whichever block is generated, and value i is the
// float of lo + (hi - lo) u for the stream's draw at counter i (what the models' weights have
// always been: the golden cases depend on it).
TEST(SeededMatrix, RowBlocksAreTheWholeMatricesRows) {
  const SeededMatrix w{77, 3, 9, 5, -0.25, 0.5};
  const Tensor<float> whole = w.whole();
  for (int64_t first = 0; first < w.rows; ++first)
    for (int64_t count = 0; first + count <= w.rows; ++count) {
      const Tensor<float> block = w.row_block(first, count);
      ASSERT_EQ(block.shape, (Shape{count, w.cols}));
      for (int64_t i = 0; i < count * w.cols; ++i)
        ASSERT_EQ(block.data[size_t(i)], whole.data[size_t(first * w.cols + i)])
            << first << " " << i;
    }
  for (int64_t i = 0; i < whole.size(); ++i) {
    const double u = philox_uniform(philox_draw(77, 3, uint32_t(i)).v[0]);
    EXPECT_EQ(whole.data[size_t(i)], float(-0.25 + 0.75 * u)) << i;
    EXPECT_GE(whole.data[size_t(i)], -0.25f);
    EXPECT_LT(whole.data[size_t(i)], 0.5f);
  }
}

// Counters past 2^32 go on in the stream word: a stream longer than 2^32 values (an expert table
// at a release's size) does not repeat its start.
TEST(SeededMatrix, CountersPast2To32DoNotWrap) {
  const uint64_t wrap = uint64_t{1} << 32;
  int same = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    same += seeded_weight(5, 2, i, -1, 1) == seeded_weight(5, 2, i + wrap, -1, 1);
    EXPECT_EQ(seeded_weight(5, 2, i + wrap, -1, 1),
              float(-1 + 2.0 * philox_uniform(philox_draw(5, 2, uint32_t(i), 1).v[0])));
  }
  EXPECT_LT(same, 2);
  // The block generator across the boundary, and a tail shorter than its lanes; then a run
  // across three of seeded_weights' blocks of words (2048), in float and in double.
  std::vector<float> batch(45);
  seeded_weights(5, 2, wrap - 20, int64_t(batch.size()), -1.0, 1.0, batch.data());
  for (size_t i = 0; i < batch.size(); ++i)
    EXPECT_EQ(batch[i], float(seeded_weight(5, 2, wrap - 20 + i, -1, 1))) << i;
  std::vector<float> floats(6155);
  std::vector<double> doubles(floats.size());
  seeded_weights(5, 2, wrap - 3000, int64_t(floats.size()), -0.5, 0.25, floats.data());
  seeded_weights(5, 2, wrap - 3000, int64_t(doubles.size()), -0.5, 0.25, doubles.data());
  for (size_t i = 0; i < floats.size(); ++i) {
    ASSERT_EQ(floats[i], float(seeded_weight(5, 2, wrap - 3000 + i, -0.5, 0.25))) << i;
    ASSERT_EQ(doubles[i], double(floats[i])) << i;
  }
}

// Every build of the word generator this CPU runs (AVX-512, AVX2, the baseline) gives
// philox_draw's first word at each counter: runs of every length up to past two of its 32-lane
// groups, at offsets inside a group, below and across 2^32; a word past the run is not touched.
TEST(SeededMatrix, EveryInstructionSetsWordsArePhiloxsFirstWords) {
  const uint64_t wrap = uint64_t{1} << 32;
  for (SeededIsa isa : seeded_isas())
    for (uint64_t first : {uint64_t{0}, uint64_t{5}, uint64_t{1000003}, wrap - 37, wrap + 3})
      for (int64_t n = 0; n <= 70; ++n) {
        std::vector<uint32_t> words(size_t(n) + 1, 0xA5A5A5A5u);
        seeded_words(0x1234'5678'9ABCull, 11, first, n, words.data(), isa);
        for (int64_t i = 0; i < n; ++i) {
          const uint64_t c = first + uint64_t(i);
          ASSERT_EQ(words[size_t(i)],
                    philox_draw(0x1234'5678'9ABCull, 11, uint32_t(c), uint32_t(c >> 32)).v[0])
              << "isa " << int(isa) << " first " << first << " n " << n << " i " << i;
        }
        ASSERT_EQ(words[size_t(n)], 0xA5A5A5A5u) << "isa " << int(isa) << " n " << n;
      }
}

}  // namespace
}  // namespace tandem
