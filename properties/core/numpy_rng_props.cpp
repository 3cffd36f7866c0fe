// core/numpy_rng: default_rng(seed).integers(0, high, size, dtype=int64) as numpy 1.24 draws them.
// Expected values printed by numpy 1.24.2 (python3-numpy, Debian 12).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/numpy_rng.hpp"

namespace tandem {
namespace {

int64_t engram_half(int64_t vocab) { return std::max<int64_t>(1, (INT64_MAX / vocab) / 2); }

TEST(NumpyRng, SeedSequenceState) {
  // SeedSequence(10007).generate_state(4, np.uint64)
  const std::vector<uint32_t> w = seed_sequence_state(10007, 8);
  const uint64_t want[4] = {0x77d32a348ad70d07ull, 0x993ed609b84a4fa5ull, 0xd5f972dec8698e49ull,
                            0x7d79ebaebcf148deull};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(uint64_t{w[2 * i]} | uint64_t{w[2 * i + 1]} << 32, want[i]);
}

struct Vector {
  uint64_t seed;
  int64_t vocab;
  std::vector<int64_t> draws;
};

TEST(NumpyRng, IntegersMatchNumpy) {
  const Vector vectors[] = {
      {0 + 10007 * 1, 99092, {38316048023122, 2419938046656, 17979836159674, 36993668729195}},
      {0 + 10007 * 14, 99092, {33858405369630, 25755403400457, 15460673601360, 41309613242795}},
      {42 + 10007 * 1, 3001, {830042615025831, 940559655853068, 1303838187246898, 500285212004481}},
      {7, 3001, {960594476348912, 1378763192759574, 1192008947816712, 346079589913006}},
      // high < 2^32: numpy's 32-bit Lemire path on buffered halves
      {0 + 10007 * 2, int64_t{1} << 33, {344448810, 441288469, 485895622, 213976932}},
  };
  for (const Vector& v : vectors)
    EXPECT_EQ(numpy_integers(v.seed, engram_half(v.vocab), 4), v.draws) << "seed " << v.seed;
  EXPECT_EQ(engram_half(99092), 46539438283891);
}

// numpy's bounded draws take the raw 32-bit word when the range is exactly 2^32 values (high =
// 2^32; the Lemire step would multiply by 2^32 mod 2^32 = 0 and return zeros).
TEST(NumpyRng, FullThirtyTwoBitRangeIsRawDraws) {
  for (uint64_t seed : {0ull, 5ull, 20261202ull}) {
    Pcg64 rng(seed);
    std::vector<int64_t> raw;
    for (int i = 0; i < 9; ++i) raw.push_back(rng.next32());
    EXPECT_EQ(numpy_integers(seed, int64_t{1} << 32, 9), raw) << "seed " << seed;
  }
}

}  // namespace
}  // namespace tandem
